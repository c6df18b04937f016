"""What a draft proposes each step, and the interface every proposer implements.

Both decoding loops call a `Proposer` the same way: the engine (`utils.engine.decoder`) and the naive PyTorch
oracle it is tested against (`utils.reference.speculative`). Implementations: `utils.engine.draft.DSparkProposer`
(the exported draft on OpenVINO), `utils.reference.speculative.DSparkDrafter` (the PyTorch reference draft), and the
stand-ins of the tests and benchmarks.

The context a proposer receives each step is the target's hidden states [N, L*H] (concatenated outputs of
the draft's target layers) of the positions it has not seen yet: the whole prompt at the first step, then
the anchor and the accepted drafts of the previous step, one position per token that step emitted. A stand-in
that knows the answer finds its place that way: one token exists at the first call, then `len(context)` more
at each later one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from utils.engine.step_cost import StepCost
from utils.engine.timing import Clock, StageTimer

__all__ = ["Proposal", "Proposer"]


@dataclass(frozen=True)
class Proposal:
    """The draft tokens of one step, in target ids, with the confidence head's estimate for each (if it has one)."""

    target_ids: tuple[int, ...]
    confidences: tuple[float, ...] | None = None

    def confident_prefix(self, threshold: float, step_cost: StepCost | None = None) -> tuple[int, ...]:
        """The drafts to verify: the leading ones whose confidence reaches `threshold` (all when it is 0, or
        when there are no confidences). The target then verifies fewer tokens when the draft doubts. With a
        `step_cost`, that prefix is cut further to the length with the most expected tokens per millisecond on
        the device (`StepCost.best_prefix_length`)."""
        if self.confidences is None:
            return self.target_ids
        kept = 0
        while kept < len(self.target_ids) and (threshold <= 0 or self.confidences[kept] >= threshold):
            kept += 1
        if step_cost is not None:
            kept = step_cost.best_prefix_length(self.confidences[:kept])
        return self.target_ids[:kept]


class Proposer(Protocol):
    """Proposes draft tokens for each speculative step."""

    clocks: tuple[Clock, ...]  # the clocks of the OpenVINO models it runs (empty for stand-ins and PyTorch)

    def reset(self) -> None:
        """Forgets the previous generation (called before each one)."""

    def propose(self, anchor: int, context, *, num_tokens: int, timer: StageTimer) -> Proposal:
        """`num_tokens` drafts after `anchor`, given the target's hidden states not yet seen [N, L*H].

        `timer` receives the proposer's own stages ("draft", "markov_head"), if it has any.
        """
