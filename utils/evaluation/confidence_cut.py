"""What the confidence cut did in one reading: the steps whose last drafts it left unverified, and how many of
those drafts the target would have accepted.

A step verifies only the leading drafts whose confidence reaches the threshold; the rest are cut. Greedy
verification accepts a draft only with every draft before it, so a cut draft would have been accepted exactly when
the step accepted every draft it verified and the cut drafts go on as the text does. The text is the target's own
(speculative decoding changes no token), so it answers that without running the target again; a draft past the
end of what was read counts as not accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from utils.engine.verification import StepRecord

__all__ = ["CutSummary", "cut_summary"]


@dataclass(frozen=True)
class CutSummary:
    """The confidence cut over one reading's steps."""

    steps: int  # every step of the reading, the prefill included
    steps_with_cut: int  # steps that left at least one draft unverified
    cut_drafts: int  # drafts left unverified, over all steps
    acceptable: int  # of those, the drafts the target would have accepted had they been verified


def _leading_matches(drafts: Sequence[int], text: Sequence[int]) -> int:
    matched = 0
    while matched < min(len(drafts), len(text)) and drafts[matched] == text[matched]:
        matched += 1
    return matched


def cut_summary(steps: Sequence[StepRecord]) -> CutSummary:
    """Counts the cut drafts of one reading (`OcrResult.metrics.steps`) and those the target would have accepted."""
    text = [token for step in steps for token in step.emitted]
    start = steps_with_cut = cut_drafts = acceptable = 0
    for step in steps:
        verified = len(step.drafted)
        if step.cut:
            steps_with_cut, cut_drafts = steps_with_cut + 1, cut_drafts + len(step.cut)
            if step.matched_drafts == verified and len(step.emitted) > verified:  # all verified accepted, a bonus
                acceptable += _leading_matches(step.cut, text[start + verified:])
        start += len(step.emitted)
    return CutSummary(steps=len(steps), steps_with_cut=steps_with_cut, cut_drafts=cut_drafts, acceptable=acceptable)
