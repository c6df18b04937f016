"""The cost-aware prefix: how many drafts a step should verify at a device's cost (`utils.engine.step_cost`)."""

from __future__ import annotations

import numpy as np
import pytest

from utils.engine.proposal import Proposal
from utils.engine.step_cost import StepCost


def _rate(confidences, cost: StepCost, count: int) -> float:
    """Expected tokens per ms when the first `count` drafts are verified, written out from its definition."""
    tokens, reached = 1.0, 1.0
    for confidence in confidences[:count]:
        reached *= confidence
        tokens += reached
    return tokens / (cost.fixed_ms + cost.per_draft_ms * count)


@pytest.mark.parametrize("seed", range(20))
def test_the_prefix_has_the_most_expected_tokens_per_millisecond(seed):
    rng = np.random.default_rng(seed)
    confidences = tuple(rng.uniform(0.0, 1.0, size=rng.integers(0, 16)) ** 0.3)
    cost = StepCost(fixed_ms=rng.uniform(20, 400), per_draft_ms=rng.uniform(0, 60))
    rates = [_rate(confidences, cost, count) for count in range(len(confidences) + 1)]
    best = cost.best_prefix_length(confidences)
    assert rates[best] == pytest.approx(max(rates)) and all(rate < rates[best] * (1 + 1e-12) for rate in rates[:best])


def test_cheap_drafts_are_all_verified_and_dear_ones_stop_at_the_first_doubt():
    confidences = (0.95, 0.9, 0.4, 0.95, 0.9)
    assert StepCost(fixed_ms=130, per_draft_ms=3.7).best_prefix_length(confidences) == 5  # AVX-512 BF16, bf16
    assert StepCost(fixed_ms=400, per_draft_ms=90).best_prefix_length(confidences) == 2
    assert StepCost(fixed_ms=100, per_draft_ms=0).best_prefix_length((0.9, 0.0, 0.9)) == 1  # nothing after a 0
    assert StepCost(fixed_ms=100, per_draft_ms=5).best_prefix_length(()) == 0


def test_the_threshold_cuts_first_then_the_cost():
    proposal = Proposal((11, 12, 13, 14, 15), (0.95, 0.9, 0.4, 0.95, 0.9))
    assert proposal.confident_prefix(0.5) == (11, 12)
    assert proposal.confident_prefix(0.0, StepCost(fixed_ms=400, per_draft_ms=90)) == (11, 12)
    assert proposal.confident_prefix(0.92, StepCost(fixed_ms=130, per_draft_ms=3.7)) == (11,)
    assert Proposal((11, 12), None).confident_prefix(0.5, StepCost(fixed_ms=400, per_draft_ms=900)) == (11, 12)


def test_a_step_cost_from_two_calls():
    cost = StepCost.from_calls(drafting_ms=45.0, anchor_ms=90.0, verification_ms=150.0, drafts=15)
    assert cost == StepCost(fixed_ms=135.0, per_draft_ms=4.0)
    assert StepCost.from_calls(drafting_ms=45.0, anchor_ms=90.0, verification_ms=80.0, drafts=15).per_draft_ms == 0


@pytest.mark.parametrize("arguments, message", [
    ({"fixed_ms": 0, "per_draft_ms": 1}, "fixed_ms > 0"),
    ({"fixed_ms": 10, "per_draft_ms": -1}, "per_draft_ms >= 0"),
    ({"fixed_ms": float("nan"), "per_draft_ms": 1}, "fixed_ms > 0"),
])
def test_a_bad_step_cost_is_refused(arguments, message):
    with pytest.raises(ValueError, match=message):
        StepCost(**arguments)
    with pytest.raises(ValueError, match="drafts=0"):
        StepCost.from_calls(drafting_ms=1, anchor_ms=1, verification_ms=2, drafts=0)
