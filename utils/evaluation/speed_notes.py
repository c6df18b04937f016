"""What a benchmark's speed table says, in sentences built from it: the fastest configuration, what one step
costs, and the reason for each order that surprises (a dense walk faster than the Top-K scorer, a compressed
draft slower than fp32) when the order is clear, that is, outside the spread of the repeats.
"""

from __future__ import annotations

__all__ = ["clearly_slower", "speed_notes"]


def clearly_slower(config: dict, than: dict) -> bool:
    """Slower in every repeat than the other in its slowest: an order the spread cannot explain away."""
    return max(config["speedup_by_repeat"]) < min(than["speedup_by_repeat"])


def _ms_per_step(config: dict, stage: str) -> float:
    steps = sum(config["tokens_per_step_histogram"]) or config["generated_tokens"]
    return 1000 * config["time_breakdown_s"][stage] / steps


def speed_notes(results: dict, *, top_k: str, dense: str, compressed: dict[str, str], draft_vocab_size: int
                ) -> list[str]:
    """Sentences about one `run_benchmark` results document.

    Args:
        top_k: name of the fp32 draft's Top-K configuration; dense: the same with the dense walk.
        compressed: format name -> configuration name of each compressed draft at the same settings.
        draft_vocab_size: the draft vocabulary the walks run over.
    """
    configs = {config["name"]: config for config in results["configurations"]}
    alone, best = results["configurations"][0], max(results["configurations"][1:], key=lambda c: c["speedup"])
    notes = [f"fastest configuration on this run: {best['name']}, {best['speedup']:.2f}x "
             f"({best['decode_tokens_per_s']:.0f} vs {alone['decode_tokens_per_s']:.0f} tokens/s)",
             f"per step: decode {_ms_per_step(alone, 'verification'):.1f} ms (target alone); with the draft: "
             f"verification {_ms_per_step(configs[top_k], 'verification'):.1f} ms, draft block "
             f"{_ms_per_step(configs[top_k], 'draft'):.1f} ms, Markov head {_ms_per_step(configs[top_k], 'markov_head'):.1f} ms"]
    walks = configs[top_k], configs[dense]
    order = ("clearly faster" if clearly_slower(*walks) else "clearly slower" if clearly_slower(*walks[::-1])
             else "within the spread of the repeats: no clear order")
    notes.append(f"dense walk vs Top-K scorer: {walks[1]['speedup']:.2f}x vs {walks[0]['speedup']:.2f}x, the dense "
                 f"walk {order}")
    if order == "clearly faster":
        notes.append(f"why: over a draft vocabulary of {draft_vocab_size} tokens a full argmax costs less than a "
                     "Top-K selection and a second argmax among the candidates; over the real draft's 114,688 "
                     "tokens upstream measured the dense walk far slower (1.08x against 2.23x)")
    slower = [name for name, config in compressed.items() if clearly_slower(configs[config], configs[top_k])]
    if slower:
        notes.append(f"{' and '.join(slower)} clearly slower than the fp32 draft; why: this draft's matrices are so "
                     "small that unpacking compressed weights costs more than the memory traffic it saves; at real "
                     "size a draft is memory-bound and compressed drafts are the faster (docs/performance.md)")
    return notes
