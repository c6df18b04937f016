"""acceptance_by_position on hand-made steps: the share of steps that accepted draft position k among those that
verified it."""

from __future__ import annotations

import math

import pytest

from utils.engine.verification import StepRecord, mean_tokens_per_step
from utils.evaluation.acceptance import acceptance_by_position, conditional_acceptance

PREFILL = StepRecord(drafted=(), emitted=(7,))  # drafts nothing: not counted
TWO_ACCEPTED = StepRecord(drafted=(1, 2, 3, 4), emitted=(1, 2, 9))  # rejected at 3, so 4 is verified, not accepted
NONE_ACCEPTED = StepRecord(drafted=(1, 2, 3, 4), emitted=(5,))
ALL_ACCEPTED = StepRecord(drafted=(1, 2, 3, 4), emitted=(1, 2, 3, 4, 6))
CUT_BY_BUDGET = StepRecord(drafted=(1, 2, 3, 4), emitted=(1, 2))  # 3 and 4 never checked
SHORT_PREFIX = StepRecord(drafted=(1, 2), emitted=(1, 8))  # a confidence cut verified two drafts only


def _table(rows):
    return [(row["position"], row["verified"], row["accepted"]) for row in rows]


def test_counts_and_shares_by_position():
    rows = acceptance_by_position([PREFILL, TWO_ACCEPTED, NONE_ACCEPTED, ALL_ACCEPTED, CUT_BY_BUDGET, SHORT_PREFIX])
    assert _table(rows) == [(1, 5, 4), (2, 5, 3), (3, 3, 1), (4, 3, 1)]
    assert [row["share"] for row in rows] == pytest.approx([0.8, 0.6, 1 / 3, 1 / 3])


def test_the_share_never_rises_where_the_conditional_rate_does():
    steps = [TWO_ACCEPTED, NONE_ACCEPTED, ALL_ACCEPTED]
    assert [row["share"] for row in acceptance_by_position(steps)] == pytest.approx([2 / 3, 2 / 3, 1 / 3, 1 / 3])
    assert [row["rate"] for row in conditional_acceptance(steps)] == pytest.approx([2 / 3, 1.0, 0.5, 1.0])


def test_one_plus_the_shares_is_tokens_per_step_when_every_draft_is_verified():
    steps = [TWO_ACCEPTED, NONE_ACCEPTED, ALL_ACCEPTED]
    total = 1 + sum(row["share"] for row in acceptance_by_position(steps))
    assert total == pytest.approx(mean_tokens_per_step(steps)) == pytest.approx(3.0)


def test_an_eos_after_matched_drafts_leaves_the_rest_unchecked():
    eos = 0
    rows = acceptance_by_position([StepRecord(drafted=(1, eos, 3), emitted=(1, eos))])
    assert _table(rows) == [(1, 1, 1), (2, 1, 1), (3, 0, 0)]
    assert math.isnan(rows[2]["share"])


def test_no_drafting_step_gives_no_rows():
    assert acceptance_by_position([]) == acceptance_by_position([PREFILL]) == []


def test_the_plot_draws_one_line_of_shares_per_way_of_drafting():
    import matplotlib

    matplotlib.use("Agg")
    from utils.evaluation.plots import plot_acceptance_by_position

    curves = {"argmax": acceptance_by_position([TWO_ACCEPTED, NONE_ACCEPTED]),
              "walk": acceptance_by_position([ALL_ACCEPTED, NONE_ACCEPTED])}
    lines = plot_acceptance_by_position(curves).get_lines()
    assert [line.get_label() for line in lines] == ["argmax", "walk"]
    assert [list(line.get_ydata()) for line in lines] == [[0.5, 0.5, 0.0, 0.0], [0.5] * 4]
