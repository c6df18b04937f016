"""Steps that accepted draft k and did not reach k + 1: only the end of a reading (text, budget) or the end of the
drafts a step verified stops a step without a rejection."""

from __future__ import annotations

from utils.engine.verification import StepRecord
from utils.evaluation.acceptance import conditional_acceptance
from utils.evaluation.position_stops import stops_after_position


def test_a_step_cut_by_the_budget_after_two_accepted_drafts_is_the_one_stop_after_position_two():
    steps = [StepRecord(drafted=(1, 2, 3), emitted=(1, 2, 3, 4)),  # all accepted, a bonus
             StepRecord(drafted=(1, 5, 3), emitted=(1, 2)),  # rejected at 2
             StepRecord(drafted=(1, 2, 3), emitted=(1, 2))]  # the budget stopped it after 2 accepted drafts
    rows = conditional_acceptance(steps)
    assert [(row["reached"], row["accepted"]) for row in rows] == [(3, 3), (3, 2), (1, 1)]
    assert stops_after_position(rows) == [0, 1]
