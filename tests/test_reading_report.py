"""The reading report reads held-out pages through OpenVINO in every setting the manifest of a reading pair records."""

from __future__ import annotations

import pytest

from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD
from utils.evaluation.acceptance import scored_positions
from utils.pages.samples import CORPUS_PATH
from utils.pages.typewriter import CELL, PAGE_ROWS
from utils.pages.written_pages import WRITTEN_TEXTS
from utils.pages.reading_pages import LOOK_ALIKE_CLASSES
from utils.tiny.reading_report import WALKS, measure_reading, reading_report_summary, unseen_font_page


def test_the_unseen_font_page_shows_held_out_rows_in_another_font():
    page = unseen_font_page()
    assert len(page.text.splitlines()) == PAGE_ROWS and page.image.width > 100
    corpus = CORPUS_PATH.read_text(encoding="utf-8")
    assert all(line not in corpus for line in page.text.splitlines())  # generated rows, not corpus lines


@pytest.mark.slow
def test_a_random_reading_pair_is_measured_in_every_setting(reading_pair, tmp_path):
    """A random pair reads nothing, but the report's invariants hold: at f32 every draft walk writes what the
    target alone writes, and each figure is where the manifest expects it. Marked as a typewriter reader (as a
    trained one is), it stops at each page's end, and the image of another shape gets the notice."""
    import shutil

    from utils.pipeline.speculative_ocr import TYPEWRITER_SLACK
    from utils.tiny.reader import mark_typewriter_reader

    root = shutil.copytree(reading_pair.root, tmp_path / "pair")
    mark_typewriter_reader(root / "target")
    figures = measure_reading(root, pages=2)
    assert figures["pages"] == 2 and figures["split"] == "held-out"
    assert set(figures["f32_every_draft_verified"]) == set(WALKS)
    for walk in figures["f32_every_draft_verified"].values():
        assert walk["cer"] == figures["target_only"]["f32"]["cer"]
    assert figures["cli_defaults"]["confidence_threshold"] == DEFAULT_CONFIDENCE_THRESHOLD
    truth = _read_independently(root, tmp_path / "ir")
    assert figures["speculative_equals_target_only_at_f32"] == truth["speculative equals target-only at f32"]
    assert figures["pages_equal_at_default_and_f32"] == truth["pages equal at the defaults and f32"]
    assert figures["default_precision"] == truth["default precision"]
    assert figures["cli_defaults"]["rejected_drafts"] == truth["drafts rejected at the defaults"]
    assert list(figures["written_pages"]["readings"]) == list(WRITTEN_TEXTS)[:1]  # a quick check reads fewer
    hard = figures["hard_pages"]
    assert hard["look_alikes"]["pages"] == 7 and hard["digit_grids"]["pages"] == 1  # one per glyph size, one grid
    assert set(hard["look_alikes"]["accuracy_by_class"]) == set(LOOK_ALIKE_CLASSES)
    shape = figures["another_shape"]
    assert "reads only typewriter pages" in shape["notice"] and shape["image_size"] == [17 * CELL, 3 * CELL]
    assert shape["tokens"] <= 3 * 17 + TYPEWRITER_SLACK
    mechanisms = figures["mechanisms"]  # what each DSpark mechanism changes, on the held-out and written pages
    assert mechanisms["pages"] == 2 + 1 and set(mechanisms["readings"]) == {"top_k_scorer", "dense_walk", "argmax"}
    assert mechanisms["confidence"]["rejected_drafts"] == mechanisms["summary"]["rejections"]
    summary = reading_report_summary(figures)
    assert "CLI defaults" in summary and "a font never trained on" in summary and "notice: yes" in summary
    assert "DSpark's mechanisms on the held-out and hand-written pages (3)" in summary and "walk_over_argmax" in summary
    assert "look-alike glyphs (7 pages" in summary and "digit grids (1 pages)" in summary


def _read_independently(root, folder) -> dict:
    """The figures `measure_reading` computes from its own readings, computed again from readings made here: the
    two held-out pages read by every walk at f32, by the target alone at f32, and at the command line's defaults."""
    from utils.export.draft import export_draft
    from utils.export.target import export_target
    from utils.pages.reading_pages import reading_pages
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    draft = export_draft(root / "draft", folder / "draft")
    target = export_target(root / "target", folder / "target", draft=root / "draft")
    pages = reading_pages(2, seed=0, split="held-out")
    exact = SpeculativeOcrPipeline(target, draft, device="CPU", precision="f32", draft_precision="f32")
    alone = [SpeculativeOcrPipeline(target, device="CPU", precision="f32").generate(page.image).tokens
             for page in pages]
    walks = [[exact.generate(page.image, confidence_threshold=0.0, markov_head_top_k=top_k).tokens for page in pages]
             for top_k in WALKS.values()]
    defaults = SpeculativeOcrPipeline(target, draft, device="CPU")
    runs = [defaults.generate(page.image) for page in pages]
    cli = [run.tokens for run in runs]
    _, accepted = scored_positions([step for run in runs for step in run.metrics.steps])
    return {"drafts rejected at the defaults": accepted.count(False),
            "speculative equals target-only at f32": all(tokens == alone for tokens in walks),
            "pages equal at the defaults and f32": sum(a == b for a, b in zip(cli, alone)),
            "default precision": defaults.inference_precision}
