"""The confidence cut's summary: the steps it cut, and the cut drafts the target's own text shows it would have
accepted (only where every verified draft was accepted, and only as far as the cut drafts follow the text)."""

from __future__ import annotations

from utils.engine.verification import StepRecord
from utils.evaluation.confidence_cut import cut_summary


def test_cut_drafts_count_as_acceptable_only_after_a_fully_accepted_step_and_while_they_follow_the_text():
    steps = [
        StepRecord(drafted=(), emitted=(1,)),  # prefill
        StepRecord(drafted=(2, 3), emitted=(2, 3, 4), cut=(4, 5, 7)),  # 4 and 5 follow the text, 7 does not
        StepRecord(drafted=(5,), emitted=(5, 6), cut=(6,)),  # the cut draft is the bonus, then the text goes on
        StepRecord(drafted=(9,), emitted=(7,), cut=(8,)),  # a rejected draft: its cut drafts would be discarded
        StepRecord(drafted=(), emitted=(8,), cut=(8, 1)),  # everything cut: 8 follows (the bonus), 1 is past the text
    ]
    summary = cut_summary(steps)
    assert (summary.steps, summary.steps_with_cut, summary.cut_drafts) == (5, 4, 7)
    assert summary.acceptable == 2 + 1 + 0 + 1


def test_a_reading_without_a_cut_has_nothing_to_count():
    summary = cut_summary([StepRecord(drafted=(), emitted=(1,)), StepRecord(drafted=(2,), emitted=(2, 3))])
    assert (summary.steps_with_cut, summary.cut_drafts, summary.acceptable) == (0, 0, 0)
