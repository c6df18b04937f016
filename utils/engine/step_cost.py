"""What a speculative step costs on a device, and how many drafts are worth verifying at that cost.

A step pays a fixed part whatever it verifies (the draft's block, the Markov head, the host, and the target's call
on the anchor alone) and a part that grows with the drafts verified: a line, `fixed_ms + per_draft_ms * n`
(`benchmarks.cpu_speedup` measures it on a device). The confidence head's scores are probabilities that each draft
is accepted once the drafts before it were, so verifying the first n drafts emits on average

    E(n) = 1 + c_1 + c_1 c_2 + ... + c_1 ... c_n tokens.

The cost-aware prefix is the n with the most expected tokens per millisecond, E(n) / (fixed_ms + per_draft_ms * n):
where a draft costs little to verify (a CPU with AVX-512 BF16 verifies 16 tokens in 1.6x a single token's time,
docs/performance.md) it keeps almost every draft, and where it costs much (2.7x on an AVX2-only CPU) it stops at the
first doubtful one, as confidence-based draft scheduling in serving engines does (TensorRT-LLM's, for one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["StepCost"]


@dataclass(frozen=True)
class StepCost:
    """A speculative step's cost on one device: `fixed_ms` plus `per_draft_ms` per verified draft."""

    fixed_ms: float
    per_draft_ms: float

    def __post_init__(self):
        if not self.fixed_ms > 0 or not self.per_draft_ms >= 0:
            raise ValueError(f"a step cost needs fixed_ms > 0 and per_draft_ms >= 0, not {self.fixed_ms} and "
                             f"{self.per_draft_ms}")

    def expected_tokens(self, confidences: Sequence[float]) -> np.ndarray:
        """E(n) for n = 0 .. len(confidences): the tokens a step emits on average when it verifies n drafts."""
        reached = np.cumprod(np.clip(np.asarray(confidences, np.float64), 0.0, 1.0))
        return 1.0 + np.concatenate(([0.0], np.cumsum(reached)))

    def best_prefix_length(self, confidences: Sequence[float]) -> int:
        """The number of leading drafts whose verification gives the most expected tokens per millisecond (the
        shortest such prefix on a tie)."""
        counts = np.arange(len(confidences) + 1)
        rates = self.expected_tokens(confidences) / (self.fixed_ms + self.per_draft_ms * counts)
        return int(np.argmax(rates))

    @classmethod
    def from_calls(cls, *, drafting_ms: float, anchor_ms: float, verification_ms: float, drafts: int) -> StepCost:
        """The line through two measured calls of the target: on the anchor alone (`anchor_ms`, a decode step) and on
        the anchor and `drafts` drafts (`verification_ms`); `drafting_ms` is the rest of a step (the draft's block,
        the Markov head, the host)."""
        if drafts < 1:
            raise ValueError(f"drafts={drafts} must be >= 1")
        return cls(fixed_ms=drafting_ms + anchor_ms, per_draft_ms=max(verification_ms - anchor_ms, 0.0) / drafts)
