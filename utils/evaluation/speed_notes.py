"""What a speed table says, in sentences built from it: the fastest configuration, what one step costs, and each
order the suite's notebooks ask about, stated only when the spreads of the repeats do not overlap ("within noise"
otherwise). No sentence gives a reason the table cannot show.
"""

from __future__ import annotations

__all__ = ["WITHIN_NOISE", "spread_order", "speed_notes"]

WITHIN_NOISE = "within noise (the repeats overlap)"


def spread_order(mine: tuple[float, float], other: tuple[float, float], *, higher_is_faster: bool = False) -> str:
    """"faster", "slower" or `WITHIN_NOISE`: how the spread (lowest, highest) of one configuration's repeats
    compares with another's. Times by default (lower is faster); speedups with `higher_is_faster`."""
    if higher_is_faster:
        mine, other = (-mine[1], -mine[0]), (-other[1], -other[0])
    if mine[1] < other[0]:
        return "faster"
    if other[1] < mine[0]:
        return "slower"
    return WITHIN_NOISE


def _ms_per_step(config: dict, stage: str) -> float:
    steps = sum(config["tokens_per_step_histogram"]) or config["generated_tokens"]
    return 1000 * config["time_breakdown_s"][stage] / steps


def _speedup_order(config: dict, than: dict) -> str:
    spread = lambda c: (min(c["speedup_by_repeat"]), max(c["speedup_by_repeat"]))  # noqa: E731
    return spread_order(spread(config), spread(than), higher_is_faster=True)


def speed_notes(results: dict, *, top_k: str, dense: str, compressed: dict[str, str]) -> list[str]:
    """Sentences about one `run_benchmark` results document.

    Args:
        top_k: name of the fp32 draft's Top-K configuration; dense: the same with the dense walk.
        compressed: format name -> configuration name of each compressed draft at the same settings.
    """
    configs = {config["name"]: config for config in results["configurations"]}
    alone, best = results["configurations"][0], max(results["configurations"][1:], key=lambda c: c["speedup"])
    notes = [f"fastest configuration on this run: {best['name']}, {best['speedup']:.2f}x "
             f"({best['decode_tokens_per_s']:.0f} vs {alone['decode_tokens_per_s']:.0f} tokens/s)",
             f"per step: decode {_ms_per_step(alone, 'verification'):.1f} ms (target alone); with the draft: "
             f"verification {_ms_per_step(configs[top_k], 'verification'):.1f} ms, draft block "
             f"{_ms_per_step(configs[top_k], 'draft'):.1f} ms, Markov head {_ms_per_step(configs[top_k], 'markov_head'):.1f} ms"]
    walks = configs[top_k], configs[dense]
    notes.append(f"dense walk vs Top-K scorer: {walks[1]['speedup']:.2f}x vs {walks[0]['speedup']:.2f}x, the dense "
                 f"walk {_speedup_order(walks[1], walks[0])}")
    notes += [f"{name} draft vs the fp32 draft: {configs[config]['speedup']:.2f}x vs {walks[0]['speedup']:.2f}x, "
              f"{_speedup_order(configs[config], walks[0])}" for name, config in compressed.items()]
    return notes
