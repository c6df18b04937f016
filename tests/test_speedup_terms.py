"""The speedup's terms: per-step costs of both runs whose formula gives the measured speedup exactly, with the
prefill left out of the tokens per step."""

from __future__ import annotations

import pytest

from utils.engine.metrics import GenerationMetrics
from utils.engine.verification import StepRecord
from utils.evaluation.speedup_terms import SpeedupTerms


def _metrics(steps: list[StepRecord], *, ttft: float, total: float, stages: dict) -> GenerationMetrics:
    return GenerationMetrics(ttft=ttft, total=total, num_generated_tokens=sum(len(s.emitted) for s in steps),
                             steps=steps, stage_seconds=stages, openvino_seconds=0.0)


def _runs() -> tuple[GenerationMetrics, GenerationMetrics]:
    alone = _metrics([StepRecord(drafted=(), emitted=(1,))] + [StepRecord(drafted=(), emitted=(2,))] * 9,
                     ttft=0.1, total=1.0, stages={"verification": 0.81})  # 9 decode steps of 100 ms, 90 in the call
    drafted = _metrics([StepRecord(drafted=(), emitted=(1,)), StepRecord(drafted=(2, 2, 2, 2), emitted=(2,) * 5),
                        StepRecord(drafted=(2, 2, 2, 2), emitted=(2,) * 4)],
                       ttft=0.1, total=0.4, stages={"draft": 0.04, "markov_head": 0.02, "verification": 0.2})
    return alone, drafted


def test_the_formula_gives_the_measured_speedup_from_the_per_step_costs():
    terms = SpeedupTerms.of(*_runs())
    assert terms.decode_ms == pytest.approx(90.0) and terms.decode_host_ms == pytest.approx(10.0)
    assert (terms.draft_ms, terms.markov_ms, terms.verification_ms) == pytest.approx((20.0, 10.0, 100.0))
    assert terms.host_ms == pytest.approx(20.0) and terms.step_ms == pytest.approx(150.0)
    assert terms.tokens_per_step == pytest.approx(10 / 3) and terms.tokens_per_decode_step == pytest.approx(4.5)
    assert terms.tokens_verified == pytest.approx(5.0)
    assert terms.measured == pytest.approx(3.0) and terms.predicted == pytest.approx(terms.measured)
    lines = terms.lines()
    assert "3.33 with the prefill, 4.50 per decode step" in lines[3]
    assert lines[-1] == "speedup = 4.50 tokens per decode step x 100.0 ms / 150.0 ms = 3.00x; measured: 3.00x"


def test_runs_of_different_texts_or_without_a_decode_step_are_refused():
    alone, drafted = _runs()
    with pytest.raises(ValueError, match="same text"):
        SpeedupTerms.of(alone, _metrics(drafted.steps[:2], ttft=0.1, total=0.3, stages={}))
    single = _metrics([StepRecord(drafted=(), emitted=(1,))], ttft=0.1, total=0.1, stages={})
    with pytest.raises(ValueError, match="no decode step"):
        SpeedupTerms.of(single, single)
