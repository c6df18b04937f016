"""The speed notes explain an order only when it is clear beyond the spread of the repeats."""

from __future__ import annotations

from utils.evaluation.speed_notes import clearly_slower, speed_notes


def _config(name: str, speedups: list[float]) -> dict:
    return {"name": name, "speedup": sorted(speedups)[len(speedups) // 2], "speedup_by_repeat": speedups,
            "decode_tokens_per_s": 30.0 * speedups[0], "tokens_per_step_histogram": [0, 2, 3],
            "generated_tokens": 12, "time_breakdown_s": {"verification": 0.5, "draft": 0.1, "markov_head": 0.05}}


def _results(dense: list[float], int8: list[float]) -> dict:
    return {"configurations": [_config("target only", [1.0, 1.0]), _config("top", [2.0, 2.2]),
                               _config("dense", dense), _config("int8", int8)]}


def test_clear_orders_are_explained_and_overlapping_ones_are_not():
    clear = speed_notes(_results([2.5, 2.6], [1.5, 1.6]), top_k="top", dense="dense", compressed={"int8": "int8"},
                        draft_vocab_size=448)
    assert "the dense walk clearly faster" in clear[2] and "448 tokens" in clear[3]
    assert clear[4].startswith("int8 clearly slower than the fp32 draft")
    overlapping = speed_notes(_results([2.1, 2.3], [1.9, 2.1]), top_k="top", dense="dense",
                              compressed={"int8": "int8"}, draft_vocab_size=448)
    assert "no clear order" in overlapping[2] and len(overlapping) == 3
    assert overlapping[1] == ("per step: decode 100.0 ms (target alone); with the draft: verification 100.0 ms, "
                              "draft block 20.0 ms, Markov head 10.0 ms")


def test_clearly_slower_compares_the_extremes_of_the_repeats():
    assert clearly_slower({"speedup_by_repeat": [1.0, 1.4]}, {"speedup_by_repeat": [1.5, 3.0]})
    assert not clearly_slower({"speedup_by_repeat": [1.0, 1.6]}, {"speedup_by_repeat": [1.5, 3.0]})
