"""The reading report reads held-out pages through OpenVINO in every setting the manifest of a reading pair records."""

from __future__ import annotations

import pytest

from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD
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
    assert figures["speculative_equals_target_only_at_f32"] is True
    for walk in figures["f32_every_draft_verified"].values():
        assert walk["tokens_per_step"] >= 1.0 and walk["cer"] == figures["target_only"]["f32"]["cer"]
    assert figures["cli_defaults"]["confidence_threshold"] == DEFAULT_CONFIDENCE_THRESHOLD
    assert 0 <= figures["pages_equal_at_default_and_f32"] <= 2
    assert figures["default_precision"] in ("f32", "bf16", "f16", "")
    for part in ("random_pages", "sparse_pages", "written_pages"):
        assert 0 <= figures[part]["row_slips"] and figures[part]["tokens_per_step"] >= 1.0
    assert list(figures["written_pages"]["readings"]) == list(WRITTEN_TEXTS)[:1]  # a quick check reads fewer
    hard = figures["hard_pages"]
    assert hard["look_alikes"]["pages"] == 7 and hard["digit_grids"]["pages"] == 1  # one per glyph size, one grid
    assert set(hard["look_alikes"]["accuracy_by_class"]) == set(LOOK_ALIKE_CLASSES)
    assert hard["digit_grids"]["reached_budget"] <= 1 and hard["digit_grids"]["tokens_per_step"] >= 1.0
    shape = figures["another_shape"]
    assert "reads only typewriter pages" in shape["notice"] and shape["image_size"] == [17 * CELL, 3 * CELL]
    assert shape["tokens"] <= 3 * 17 + TYPEWRITER_SLACK
    summary = reading_report_summary(figures)
    assert "CLI defaults" in summary and "a font never trained on" in summary and "notice: yes" in summary
    assert "look-alike glyphs (7 pages" in summary and "digit grids (1 pages)" in summary
