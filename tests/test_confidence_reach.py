"""`benchmarks.confidence_reach`: the draft's own probability of its token, and each signal's best cut, on the shipped
tiny pair (the figures themselves are the benchmark's to print, not checked here)."""

from __future__ import annotations

import pytest

from benchmarks.confidence_reach import main, reach, read_held_out_pages, signals
from utils.engine.verification import StepRecord


@pytest.fixture(scope="module")
def two_pages():
    """A generated page, where the shipped draft is hardly ever rejected, and a random one, where it is now and then."""
    return read_held_out_pages(1, random_pages=1)


def test_the_recorded_probability_is_the_drafts_softmax_of_each_proposed_token(two_pages):
    steps, probabilities = two_pages
    drafting = [step for step in steps if step.drafted]
    assert len(probabilities) == len(drafting) > 0
    assert all(len(p) == len(step.drafted) for p, step in zip(probabilities, drafting))
    assert all(0.0 < value <= 1.0 for p in probabilities for value in p)
    # an accepted draft was the draft's greedy choice given the target's previous token: mostly a sure one
    accepted = [p[i] for p, step in zip(probabilities, drafting) for i in range(step.matched_drafts)]
    assert sum(value > 0.5 for value in accepted) >= 0.9 * len(accepted)


def test_no_signal_cuts_better_than_the_oracle(two_pages):
    figures = {name: reach(scored, loss=0.02, default_threshold=0.5) for name, scored in signals(*two_pages).items()}
    oracle = figures.pop("oracle")
    assert oracle["auc"] == 1.0 and oracle["best"]["fewer tokens"] == 0.0 and oracle["best"]["fewer drafts"] > 0
    for figure in figures.values():
        assert figure["best"]["fewer tokens"] <= 0.02
        assert figure["best"]["fewer drafts"] <= oracle["best"]["fewer drafts"]


def test_a_cut_counts_the_drafts_it_saves_and_the_tokens_it_loses():
    steps = [StepRecord(drafted=(1, 2, 3, 4), emitted=(1, 2, 9), confidences=(0.9, 0.8, 0.4, 0.3)),
             StepRecord(drafted=(5, 6, 7, 8), emitted=(5, 6, 7, 8, 0), confidences=(0.9, 0.6, 0.9, 0.9))]
    figure = reach(steps, loss=0.1, default_threshold=0.5)
    assert figure["at default"]["fewer drafts"] == pytest.approx(2 / 8)  # the first step verifies 2 of 4
    assert figure["at default"]["fewer tokens"] == 0.0
    assert figure["best"]["threshold"] == 0.405  # the lowest that cuts at 0.4; above 0.6 3 of 8 tokens are lost
    cut = reach(steps, loss=0.5, default_threshold=0.7)["at default"]
    assert cut["fewer drafts"] == pytest.approx(5 / 8) and cut["fewer tokens"] == pytest.approx(3 / 8)


def test_the_command_prints_a_row_per_signal(capsys):
    main(["--pages", "1", "--random-pages", "1"])
    rows = [line.split("|")[1].strip() for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert rows[1:] == ["confidence head", "confidence head, running product", "draft's own probability",
                        "draft's own probability, running product", "oracle"]
