"""Typewriter pages: one character per cell, one cell per image token, the same pixels on every machine."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from utils.evaluation.reading_pages import reading_pages, sample_pages
from utils.evaluation.typewriter import (CELL, GLYPH_ATLAS, GLYPH_SIZES, GLYPHS, MAX_PAGE_CELLS, PAGE_CELLS, PAGE_ROWS,
                                         PAGE_WIDTH, Ink, draw_glyph_atlas, fit_page, page_text, typed_lines,
                                         render_typewriter_page)
from utils.pipeline.preprocessing import ImagePreprocessor


def test_the_shipped_atlas_is_the_font_drawn_by_the_suite():
    """Another FreeType may round a few edge pixels differently; the glyphs themselves must be the same."""
    shipped = np.asarray(Image.open(GLYPH_ATLAS).convert("L"), dtype=np.int16)
    drawn = np.asarray(draw_glyph_atlas(), dtype=np.int16)
    assert shipped.shape == drawn.shape == (len(GLYPH_SIZES) * CELL, len(GLYPHS) * CELL)
    assert np.mean(np.abs(shipped - drawn)) < 2.0


def test_page_text_pads_every_row_to_the_page_width():
    assert page_text(["ab", "abcd", "a"]) == "ab  \nabcd\na   "


def test_fit_page_gives_the_one_shape_or_names_what_does_not_fit():
    lines = ["Total 12.50", "", "ok", "x", "y", "z"]
    fitted = fit_page(lines)
    assert [line.rstrip() for line in fitted] == [line.rstrip() for line in lines]
    assert {len(line) for line in fitted} == {PAGE_WIDTH} and len(fitted) == PAGE_ROWS
    assert render_typewriter_page(fitted).size == ((PAGE_WIDTH + 1) * CELL, PAGE_ROWS * CELL)
    assert fit_page(lines[:2]) == fitted[:2] + [" " * PAGE_WIDTH] * (PAGE_ROWS - 2)  # missing rows come blank
    with pytest.raises(ValueError, match=f"a page has at most {PAGE_ROWS} rows; got 7"):
        fit_page([*lines, "w"])
    with pytest.raises(ValueError, match=f"at most {PAGE_WIDTH} characters"):
        fit_page(["x" * (PAGE_WIDTH + 1), *lines[1:]])


@pytest.mark.parametrize(("typed", "rows"), [
    ("def add(a, b):\n\treturn a + b", ["def add(a, b):", "    return a + b"]),
    ("The quick brown fox jumps over the lazy dog, again.", ["The quick brown fox jumps", "over the lazy dog, again."]),
    ("x" * 30, ["x" * PAGE_WIDTH, "xxxx"]),
    ("\n\n  indented", ["", "", "  indented"]),
])
def test_typed_text_is_wrapped_onto_the_one_page(typed, rows):
    lines = typed_lines(typed)
    assert len(lines) == PAGE_ROWS and {len(line) for line in lines} == {PAGE_WIDTH}
    assert [line.rstrip() for line in lines] == rows + [""] * (PAGE_ROWS - len(rows))


@pytest.mark.parametrize(("typed", "message"), [
    ("", "page is empty"), (" \n ", "page is empty"), ("café", "printable ASCII only; remove 'é'"),
    ("a\n" * 7, f"holds {PAGE_ROWS} rows of {PAGE_WIDTH} characters; this text needs 7 rows"),
])
def test_typed_text_that_does_not_fit_is_refused(typed, message):
    with pytest.raises(ValueError, match=message):
        typed_lines(typed)


def test_a_page_has_one_cell_per_character_and_a_blank_end_column():
    image = render_typewriter_page(["Total 12.50", "ok"])
    assert image.size == (12 * CELL, 2 * CELL)
    pixels = np.asarray(image.convert("L"))
    assert pixels[:, 11 * CELL:].min() == 255  # the end column
    assert pixels[CELL:, 2 * CELL:].min() == 255  # the second row after "ok"
    cells = pixels[:CELL].reshape(CELL, 12, CELL).min(axis=(0, 2))
    assert [bool(value < 128) for value in cells] == [char != " " for char in "Total 12.50 "]


def test_the_same_lines_give_the_same_pixels_and_random_ink_varies_them():
    lines = ["Receipt 3.50", "| a | b |"]
    assert render_typewriter_page(lines).tobytes() == render_typewriter_page(lines).tobytes()
    inked = render_typewriter_page(lines, Ink.random(np.random.default_rng(0)))
    assert inked.size == render_typewriter_page(lines).size
    assert inked.tobytes() != render_typewriter_page(lines).tobytes()


@pytest.mark.parametrize(("lines", "ink", "message"), [
    (["caf\u00e9"], None, "outside printable ASCII"),
    (["", "  "], None, "at least one character"),
    (["a"], lambda: Ink(size=30), "glyph size 30"),
    (["a"], lambda: Ink(ink=200, paper=100), "ink=200"),
    (["a"], lambda: Ink(jitter=2), "needs an rng"),
])
def test_bad_pages_are_refused(lines, ink, message):
    with pytest.raises(ValueError, match=message):
        render_typewriter_page(lines, ink() if ink else None)


def test_a_reading_target_sees_one_image_token_per_character_of_every_typewriter_page(reading_pair):
    """The reading sizes' processor passes a typewriter page at its own size: image token k is character k."""
    preprocess = ImagePreprocessor.from_pretrained(reading_pair.target)
    for page in [*sample_pages(), *reading_pages(14, seed=0, split="held-out")]:
        width, height = page.image.size
        assert (width // CELL) * (height // CELL) == PAGE_CELLS <= MAX_PAGE_CELLS
        inputs = preprocess(page.image)
        assert inputs.grid == (0, 0), page.name
        assert inputs.num_image_tokens == len(page.text) + 1, page.name  # every character, then the end
        pixels = inputs.pixel_values[0]
        assert pixels.shape[-1] == width * height // preprocess.config.patch_size  # unscaled


@pytest.mark.parametrize("read, slipped", [
    ("ab  \ncd  \nef  ", False),  # exact
    ("ab  \ncb  \nef  ", False),  # a wrong glyph keeps the place
    ("ab  \nab  \nef  ", True),  # a row repeated
    ("ab  \nef  \nef  ", True),  # a row skipped
    ("ab  \ncd  ", True),  # a row missing
    ("ab  \ncd  cd  cd\nef  ", True),  # a row that runs on, repeating itself
    ("ab  \ncd   \nef  ", False),  # one character too many is a glyph error, not a lost place
])
def test_a_row_slip_is_a_reading_that_lost_its_place(read, slipped):
    from utils.evaluation.character_error_rate import row_slip

    assert row_slip(read, "ab  \ncd  \nef  ") is slipped


def test_a_typed_page_is_the_typed_rows_drawn_in_the_sample_pages_ink():
    from utils.evaluation.typewriter import render_typewriter_page, typed_lines, typed_page

    text = "x = 1\n\ny = [2, 3]"
    assert typed_page(text).tobytes() == render_typewriter_page(typed_lines(text)).tobytes()
