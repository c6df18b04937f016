"""The seed PR's validation table, and ours beside it.

Upstream's figures (optimum-intel #2099, as upstream reports them): MiniCPM-OCR-1.0 int8 target on an Intel Core
Ultra X7 358H's Arc B390 GPU, one OmniDocBench page per document category (8 pages), greedy, up to 2048 new
tokens, `num_assistant_tokens=15`, decode throughput over the 6,292 generated tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["SEED_MAX_NEW_TOKENS", "SEED_NUM_ASSISTANT_TOKENS", "SeedRow", "SEED_ROWS", "seed_comparison"]

SEED_MAX_NEW_TOKENS = 2048
SEED_NUM_ASSISTANT_TOKENS = 15


@dataclass(frozen=True)
class SeedRow:
    """One row of the seed's table. `weights` None is the target alone; `top_k` 0 is the dense walk."""

    weights: str | None
    top_k: int | None
    tokens_per_s: float
    speedup: float
    tokens_per_step: float | None


SEED_ROWS = (
    SeedRow(None, None, 90.6, 1.00, None),
    SeedRow("bf16", None, 201.8, 2.23, 5.47),
    SeedRow("int8", None, 203.9, 2.25, 5.45),
    SeedRow("int4", None, 202.7, 2.24, 5.30),
    SeedRow("bf16", 0, 98.2, 1.08, 4.83),
)


def _walk(top_k: int | None) -> str:
    return "dense walk" if top_k == 0 else "Top-K scorer"


def _cells(*values) -> str:
    return " | ".join(values)


def seed_comparison(results: dict, seed_weights: dict[str, str]) -> str:
    """A markdown table: each configuration of a `run_benchmark` results document beside the seed's row.

    Args:
        results: the results document.
        seed_weights: draft folder (as in the results) -> the seed's weights its row compares with ("bf16",
            "int8", "int4"); a configuration the seed did not measure shows no seed figures.

    Returns:
        The table.
    """
    seed = {(row.weights, row.top_k): row for row in SEED_ROWS}
    lines = ["| Draft | Markov head | Decode tok/s | Speedup | Tokens per step "
             "| seed: draft weights | seed tok/s (Arc B390) | seed speedup | seed tokens per step |",
             "|---|---|---|---|---|---|---|---|---|"]
    for config in results["configurations"]:
        draft = config["draft"]
        known = draft is None or draft in seed_weights
        row = seed.get((seed_weights.get(draft), config["markov_head_top_k"])) if known else None
        ours = _cells("(target alone)" if draft is None else Path(draft).name,
                      "" if draft is None else _walk(config["markov_head_top_k"]),
                      f"{config['decode_tokens_per_s']:.1f}", f"{config['speedup']:.2f}x",
                      "" if draft is None else f"{config['mean_tokens_per_step']:.2f}")
        theirs = _cells("", "", "", "") if row is None else _cells(
            "(target alone)" if row.weights is None else row.weights, f"{row.tokens_per_s:.1f}", f"{row.speedup:.2f}x",
            "" if row.tokens_per_step is None else f"{row.tokens_per_step:.2f}")
        lines.append(f"| {ours} | {theirs} |")
    return "\n".join(lines)
