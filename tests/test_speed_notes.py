"""The speed notes state an order only when it is clear beyond the spread of the repeats, and give no reason."""

from __future__ import annotations

import pytest

from utils.evaluation.speed_notes import WITHIN_NOISE, speed_notes, spread_order


def _config(name: str, speedups: list[float]) -> dict:
    return {"name": name, "speedup": sorted(speedups)[len(speedups) // 2], "speedup_by_repeat": speedups,
            "decode_tokens_per_s": 30.0 * speedups[0], "tokens_per_step_histogram": [0, 2, 3],
            "generated_tokens": 12, "time_breakdown_s": {"verification": 0.5, "draft": 0.1, "markov_head": 0.05}}


def _results(dense: list[float], int8: list[float]) -> dict:
    return {"configurations": [_config("target only", [1.0, 1.0]), _config("top", [2.0, 2.2]),
                               _config("dense", dense), _config("int8", int8)]}


def test_clear_orders_are_stated_and_overlapping_ones_are_within_noise():
    clear = speed_notes(_results([2.5, 2.6], [1.5, 1.6]), top_k="top", dense="dense", compressed={"int8": "int8"})
    assert clear[2].endswith("the dense walk faster") and clear[3].endswith("1.60x vs 2.20x, slower")
    overlapping = speed_notes(_results([2.1, 2.3], [1.9, 2.1]), top_k="top", dense="dense",
                              compressed={"int8": "int8"})
    assert overlapping[2].endswith(WITHIN_NOISE) and overlapping[3].endswith(WITHIN_NOISE)
    assert overlapping[1] == ("per step: decode 100.0 ms (target alone); with the draft: verification 100.0 ms, "
                              "draft block 20.0 ms, Markov head 10.0 ms")
    assert not any("why" in note or "because" in note for note in clear + overlapping)


@pytest.mark.parametrize("mine, other, higher_is_faster, order", [
    ((1.0, 1.4), (1.5, 3.0), False, "faster"), ((1.0, 1.6), (1.5, 3.0), False, WITHIN_NOISE),
    ((3.1, 4.0), (1.5, 3.0), False, "slower"), ((1.0, 1.4), (1.5, 3.0), True, "slower"),
    ((3.1, 4.0), (1.5, 3.0), True, "faster"),
])
def test_spread_order_compares_the_extremes_of_the_repeats(mine, other, higher_is_faster, order):
    assert spread_order(mine, other, higher_is_faster=higher_is_faster) == order
