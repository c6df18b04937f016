"""The mechanism figures: each reading is the way of drafting it names, and each figure counts what it says."""

from __future__ import annotations

import json

import numpy as np
import pytest

from utils.evaluation.mechanisms import DRAFTING_WAYS, GOALS, goal_lines, mechanism_figures
from utils.evaluation.pruned_vocabulary import outside_tokens
from utils.pages.reading_pages import sample_pages
from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

BUDGET = 24  # tokens a page: the random tiny pair never writes EOS


@pytest.fixture(scope="module")
def measured(tiny_ir):
    pipeline = SpeculativeOcrPipeline(*tiny_ir, device="CPU", precision="f32", draft_precision="f32")
    vocabulary = json.loads((tiny_ir[1] / "local-to-target.json").read_text())
    pages = sample_pages()[:2]
    return pipeline, pages, vocabulary, mechanism_figures(pipeline, pages, vocabulary, max_new_tokens=BUDGET,
                                                          confidence_threshold=0.0)


def test_each_reading_drafts_the_way_it_names(measured):
    pipeline, pages, _, figures = measured
    for name, top_k in DRAFTING_WAYS.items():
        results = [pipeline.generate(page.image, markov_head_top_k=top_k, max_new_tokens=BUDGET,
                                     confidence_threshold=0.0) for page in pages]
        steps = sum(len(result.metrics.steps) for result in results)
        assert figures["readings"][name]["steps"] == steps, name
        assert figures["readings"][name]["tokens"] == sum(len(result.tokens) for result in results), name


def test_the_figures_count_what_they_say(measured):
    pipeline, pages, vocabulary, figures = measured
    results = [pipeline.generate(page.image, max_new_tokens=BUDGET, confidence_threshold=0.0) for page in pages]
    steps = [step for result in results for step in result.metrics.steps[1:]]
    assert figures["walks_differ"]["positions"] == sum(len(step.drafted) for step in steps)
    outside = outside_tokens(steps, vocabulary)
    answer = sum(len(step.emitted) for step in steps)
    assert figures["pruned_vocabulary"]["outside"] == len(outside)
    assert figures["summary"]["outside_share"] == pytest.approx(len(outside) / answer)
    rejected = sum(step.matched_drafts < len(step.drafted) for step in steps)
    assert figures["confidence"]["rejected_drafts"] == rejected
    first = figures["readings"]["argmax"]["acceptance"]["first"]
    assert first["position"] == 1 and first["rate"] == pytest.approx(first["accepted"] / first["reached"])


def test_the_draft_probability_is_its_block_softmax():
    """Each verified and cut draft gets the softmax of its block position's logits at its own draft id."""
    from utils.engine.verification import StepRecord
    from utils.evaluation.mechanisms import _draft_probabilities

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 5)).astype(np.float32)
    vocabulary = [10, 11, 12, 13, 14]  # draft id i is target id 10 + i
    step = StepRecord(drafted=(12, 10), emitted=(12, 11), confidences=(0.9, 0.8), cut=(14,), cut_confidences=(0.1,))
    (replaced,) = _draft_probabilities([step], [(logits, None, 0, 3)], {t: i for i, t in enumerate(vocabulary)})
    softmax = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    assert replaced.confidences == pytest.approx((softmax[0, 2], softmax[1, 0]))
    assert replaced.cut_confidences == pytest.approx((softmax[2, 4],))
    assert (replaced.drafted, replaced.emitted, replaced.cut) == (step.drafted, step.emitted, step.cut)
    with pytest.raises(ValueError, match="2 recorded blocks for 1 drafting steps"):
        _draft_probabilities([step], [(logits, None, 0, 3)] * 2, {})


def test_goal_lines_say_which_goals_are_met():
    summary = {name: bound for name, (_, bound) in GOALS.items()}  # every figure at its bound
    lines = goal_lines(summary)
    assert len(lines) == len(GOALS)
    assert [line.endswith(": met") for line in lines] == [relation != ">" for relation, _ in GOALS.values()]
    assert goal_lines(summary | {"confidence_auc": None})[4].endswith("NOT met")
