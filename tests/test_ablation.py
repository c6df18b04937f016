"""The ablations of notebook 07: the per-position argmax is the Top-1 scorer, and the rows count what they say."""

from __future__ import annotations

import json

import numpy as np
import pytest

from utils.engine.device import F32_PROPERTIES
from utils.engine.draft import DraftModel, MarkovHead
from utils.evaluation.ablation import (PER_POSITION_ARGMAX, Variant, compare_walks, describe_threshold,
                                       describe_walks, differing_pages, markov_variants, run_ablation,
                                       run_drafting_ablation, table_rows, threshold_variants, totals, walk_margins)
from utils.pages.reading_pages import sample_pages
from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline


@pytest.fixture(scope="module")
def pipeline(tiny_ir):
    return SpeculativeOcrPipeline(*tiny_ir, device="CPU", precision="f32", draft_precision="f32")


@pytest.mark.slow
def test_the_top_1_scorer_is_each_positions_own_best_token(tiny_ir):
    draft_folder = tiny_ir[1]
    draft = DraftModel(draft_folder, properties=F32_PROPERTIES)
    head = MarkovHead(draft_folder, properties=F32_PROPERTIES)
    local_to_target = np.array(json.loads((draft_folder / "local-to-target.json").read_text()))
    rng = np.random.default_rng(0)
    info = head.info
    hidden_size = draft.compiled.input("inputs_embeds").get_partial_shape()[2].get_length()
    context_width = draft.compiled.input("hidden_states").get_partial_shape()[2].get_length()
    logits, hidden = draft.forward_block(rng.normal(size=(1, info.block_size, hidden_size)).astype(np.float32),
                                         rng.normal(size=(1, 5, context_width)).astype(np.float32))
    tokens, _ = head.walk(logits, hidden, anchor=7, num_tokens=info.block_size, top_k=PER_POSITION_ARGMAX)
    assert tokens.tolist() == local_to_target[logits.argmax(-1)].tolist()
    walked, _ = head.walk(logits, hidden, anchor=7, num_tokens=info.block_size, top_k=0)
    assert walked.tolist() != tokens.tolist()  # the check can fail: the Markov term moves random blocks


@pytest.mark.slow
def test_every_variant_writes_the_same_text_and_the_rows_add_up(pipeline):
    pages = sample_pages()[:2]
    variants = markov_variants(pipeline.proposer.info.top_k) + threshold_variants(0.99)
    rows = run_ablation(pipeline, variants, pages, max_new_tokens=24, repeats=2)
    assert [(row["page"], row["variant"]) for row in rows] == [(p.name, v.name) for p in pages for v in variants]
    for page in pages:
        assert len({row["tokens"] for row in rows if row["page"] == page.name}) == 1  # f32: the target's own text
    for row in rows:
        assert row["drafts verified"] <= (row["steps"] - 1) * pipeline.block_size
        assert row["ms per token min"] <= row["ms per token"] <= row["ms per token max"]
        assert row["tokens per step"] == pytest.approx(len(row["tokens"]) / row["steps"])
    strict = [row for row in rows if row["variant"].startswith("threshold 0.99")]
    assert all(row["lowest confidence"] is None or row["lowest confidence"] >= 0.99 for row in strict)
    summary = totals(rows)
    assert list(summary) == [variant.name for variant in variants]
    assert summary["threshold 0.99 (default)"]["drafts verified per step"] < summary["threshold 0"][
        "drafts verified per step"]  # a threshold near 1 cuts drafts: the comparison can show a difference
    assert differing_pages(rows) and set(differing_pages(rows)) <= {page.name for page in pages}


def test_differing_pages_lists_only_pages_whose_variants_disagree():
    rows = [{"page": "a", "drafts verified": 8, "tokens per step": 4.0},
            {"page": "a", "drafts verified": 8, "tokens per step": 4.0},
            {"page": "b", "drafts verified": 8, "tokens per step": 4.0},
            {"page": "b", "drafts verified": 5, "tokens per step": 4.0}]
    assert differing_pages(rows) == ["b"]


@pytest.mark.slow
def test_walk_margins_compare_the_walks_on_every_drafted_position(pipeline):
    margins = walk_margins(pipeline, sample_pages()[:1], max_new_tokens=24)
    assert margins["positions"] == len(margins["logit_leads"]) > 0
    assert all(0 <= margins[key] <= margins["positions"]
               for key in ("top_k_equals_argmax", "dense_equals_argmax", "dense_equals_top_k"))
    assert min(margins["logit_leads"]) >= 0


def test_one_pass_reads_the_shared_variant_once_and_records_the_walks_it_drafted(pipeline):
    pages = sample_pages()[:2]
    top_k = pipeline.proposer.info.top_k
    blocks = []
    walk_rows, threshold_rows = run_drafting_ablation(pipeline, pages, top_k=top_k, threshold=0.99, max_new_tokens=24,
                                                      warm_up=False, walks=blocks)
    walk_names, threshold_names = ([v.name for v in variants] for variants in (markov_variants(top_k),
                                                                              threshold_variants(0.99)))
    assert [(r["page"], r["variant"]) for r in walk_rows] == [(p.name, v) for p in pages for v in walk_names]
    assert [(r["page"], r["variant"]) for r in threshold_rows] == [(p.name, v) for p in pages for v in threshold_names]
    shared = [r for r in walk_rows if r["variant"] == f"Top-{top_k} walk"]
    assert [{**r, "variant": "threshold 0"} for r in shared] == [r for r in threshold_rows
                                                                 if r["variant"] == "threshold 0"]
    assert compare_walks(pipeline.proposer.markov_head, blocks) == walk_margins(pipeline, pages, max_new_tokens=24)
    assert type(pipeline.proposer.markov_head).__name__ == "MarkovHead"  # the recording head is gone again
    with pytest.raises(ValueError, match="walks="):
        run_ablation(pipeline, [Variant("dense", 0, 0.0)], pages, max_new_tokens=4, walks=[])


def test_the_table_shows_the_pages_where_variants_differ_or_the_first():
    same = [_rows("a", "x", drafts=8, tokens=4, steps=2, lowest=None), _rows("a", "y", drafts=8, tokens=4, steps=2,
                                                                             lowest=None)]
    for row in same:
        row["drafts verified per step"] = 8.0
    assert [r["page"] for r in table_rows(same)] == ["a", "a"]
    other = [{**row, "page": "b"} for row in same]
    other[1] = {**other[1], "drafts verified": 5, "drafts verified per step": 5.0}
    assert [(r["page"], r["drafts verified per step"]) for r in table_rows(same + other)] == [("b", "8.00"),
                                                                                                ("b", "5.00")]


def _rows(page: str, variant: str, *, drafts: int, tokens: int, steps: int, lowest: float | None) -> dict:
    return {"page": page, "variant": variant, "tokens": (1,) * tokens, "steps": steps, "drafts verified": drafts,
            "tokens per step": tokens / steps, "lowest confidence": lowest, "ms per token": 1.0}


def test_the_paragraphs_say_where_variants_differ_and_why_from_the_figures():
    same = [_rows("a", "threshold 0", drafts=16, tokens=9, steps=3, lowest=0.62),
            _rows("a", "threshold 0.5 (default)", drafts=16, tokens=9, steps=3, lowest=0.62)]
    text = describe_threshold(same, 0.5)
    assert text.startswith("No difference on any of the 1 pages") and "0.62, above the threshold 0.5" in text
    cut = [same[0], _rows("a", "threshold 0.5 (default)", drafts=10, tokens=9, steps=3, lowest=0.7)]
    assert describe_threshold(cut, 0.5).startswith("They differ on 1 of 1 pages (a)")
    walks = [_rows("a", "per-position argmax", drafts=16, tokens=8, steps=3, lowest=None),
             _rows("a", "Top-64 walk", drafts=16, tokens=9, steps=3, lowest=None)]
    margins = {"positions": 16, "top_k_equals_argmax": 15, "dense_equals_top_k": 16, "logit_leads": [0.1, 2.0, 3.0]}
    text = describe_walks(walks, margins)
    assert "differ on 1 of 1 pages" in text and "at 15 of 16 drafted positions" in text and "0.10 at the least" in text
