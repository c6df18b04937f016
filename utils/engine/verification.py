"""Greedy verification of a draft block, shared by the PyTorch oracle loop and the decoding engine.

The target runs on `[anchor, c_1 .. c_d]` (d drafts) and gives its argmax `t_0 .. t_d`. The accepted prefix is the
longest with `c_i == t_{i-1}`; the step emits `c_1 .. c_a` and the bonus `t_a`, which is `t_0 .. t_a`. The
emitted tokens stop after the first EOS and at the token budget. Since every emitted token is the target's
own argmax, the output equals target-only greedy decoding, token for token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from utils.engine.proposal import Proposal

__all__ = ["accepted_prefix_length", "emitted_tokens", "StepRecord", "mean_tokens_per_step"]


def accepted_prefix_length(drafts: Sequence[int], target_argmax: Sequence[int]) -> int:
    """Number a of leading drafts with `drafts[i] == target_argmax[i]` (target_argmax has one more entry)."""
    if len(target_argmax) != len(drafts) + 1:
        raise ValueError(f"{len(drafts)} drafts need {len(drafts) + 1} target tokens, got {len(target_argmax)}")
    accepted = 0
    while accepted < len(drafts) and drafts[accepted] == target_argmax[accepted]:
        accepted += 1
    return accepted


def emitted_tokens(target_argmax: Sequence[int], accepted: int, *, eos_token_ids: Sequence[int], budget: int
                   ) -> list[int]:
    """The tokens a step emits: `t_0 .. t_accepted`, cut after the first EOS and to `budget` tokens."""
    tokens = [int(token) for token in target_argmax[:accepted + 1]][:max(budget, 0)]
    for index, token in enumerate(tokens):
        if token in eos_token_ids:
            return tokens[:index + 1]
    return tokens


@dataclass(frozen=True)
class StepRecord:
    """One target inference that emitted tokens.

    `accepted` counts the emitted tokens beyond the first, so `accepted + 1` tokens came out of the step (a
    step cut by EOS or the budget counts only what it emitted). The prefill step drafts nothing.
    """

    drafted: tuple[int, ...]  # the draft tokens verified, in target ids
    emitted: tuple[int, ...]
    confidences: tuple[float, ...] | None = None  # of the drafts verified
    cut: tuple[int, ...] = ()  # the drafts after them that the confidence cut left unverified
    cut_confidences: tuple[float, ...] | None = None

    @classmethod
    def from_proposal(cls, proposal: Proposal, verified: int, emitted: Sequence[int]) -> StepRecord:
        """The step that verified the first `verified` drafts of `proposal` and emitted `emitted`."""
        confidences = proposal.confidences
        return cls(drafted=tuple(proposal.target_ids[:verified]), emitted=tuple(emitted),
                   confidences=None if confidences is None else tuple(confidences[:verified]),
                   cut=tuple(proposal.target_ids[verified:]),
                   cut_confidences=None if confidences is None else tuple(confidences[verified:]))

    @property
    def accepted(self) -> int:
        return len(self.emitted) - 1

    @property
    def matched_drafts(self) -> int:
        """Leading drafts equal to the emitted token at their position (a step cut by EOS or the budget can
        match drafts it did not go on to emit a bonus for)."""
        matched = 0
        while matched < min(len(self.drafted), len(self.emitted)) and self.drafted[matched] == self.emitted[matched]:
            matched += 1
        return matched


def mean_tokens_per_step(steps: Sequence[StepRecord]) -> float:
    """Generated tokens / steps (accepted + 1 averaged over the steps)."""
    return sum(step.accepted + 1 for step in steps) / len(steps) if steps else 0.0
