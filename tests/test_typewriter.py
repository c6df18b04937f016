"""Typewriter pages: one character per cell, one cell per image token, the same pixels on every machine."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from utils.pages.reading_pages import line_split, reading_pages, sample_pages, unpredictable_sample_pages
from utils.pages.typewriter import (CELL, GLYPH_ATLAS, GLYPH_SIZES, GLYPHS, MAX_PAGE_CELLS, PAGE_CELLS, PAGE_ROWS,
                                    PAGE_WIDTH, Ink, draw_glyph_atlas, fit_page, grid_text, joined_reading, page_text,
                                    render_typewriter_page, text_cells, typed_lines, typed_pages, typed_pages_lines)
from utils.pipeline.preprocessing import ImagePreprocessor


def test_the_shipped_atlas_is_the_font_drawn_by_the_suite():
    """Another FreeType may round a few edge pixels differently; the glyphs themselves must be the same."""
    shipped = np.asarray(Image.open(GLYPH_ATLAS).convert("L"), dtype=np.int16)
    drawn = np.asarray(draw_glyph_atlas(), dtype=np.int16)
    assert shipped.shape == drawn.shape == (len(GLYPH_SIZES) * CELL, len(GLYPHS) * CELL)
    assert np.mean(np.abs(shipped - drawn)) < 2.0


def test_page_text_pads_every_row_to_the_page_width():
    assert page_text(["ab", "abcd", "a"]) == "ab  \nabcd\na   "


def test_text_cells_put_each_character_in_its_grid_cell_and_the_end_in_the_last():
    """Row r, column c is cell r * (width + 1) + c; a line break is its row's blank last column; EOS the last cell."""
    assert text_cells("ab\n c", width=3, rows=3) == [0, 1, 3, 4, 5, 11]
    assert grid_text("ab\n c", width=3, rows=3) == "ab \n c \n   "
    assert text_cells("", width=2, rows=1) == [2]
    assert text_cells("\n\nx", width=2, rows=3) == [2, 5, 6, 8]
    padded = page_text(fit_page(["Total 12.50", "", "ok"]))  # the shipped reader's text: character k is cell k
    assert text_cells(padded) == list(range(PAGE_CELLS)) and grid_text(padded) == padded
    assert grid_text("Total 12.50\n\nok") == padded
    with pytest.raises(ValueError, match="the page has 2 rows; the text has 3"):
        text_cells("a\nb\nc", width=3, rows=2)
    with pytest.raises(ValueError, match="holds 3 characters; 'abcd' has 4"):
        text_cells("abcd", width=3, rows=2)


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
    ("a\n" * 7, f"holds {PAGE_ROWS} rows of {PAGE_WIDTH} characters; this text needs 7 rows \\(typed_pages "
                 "splits it into 2 pages\\)"),
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


def test_random_ink_moves_glyphs_except_on_the_unmoved_share_and_draws_as_before_without_one():
    """At share 0 the generator gives what it gave before the share existed (size, ink, paper, glyphs moved), so a
    first phase's pages, and a reader refined from a saved one (`--reader-from`), stay the same bits."""
    moved, drawn = np.random.default_rng(5), np.random.default_rng(5)
    ink = Ink.random(moved)
    expected = (int(drawn.choice(GLYPH_SIZES)), int(drawn.integers(0, 90)), int(drawn.integers(200, 256)), 2)
    assert (ink.size, ink.ink, ink.paper, ink.jitter) == expected
    assert moved.bit_generator.state == drawn.bit_generator.state
    rng = np.random.default_rng(0)
    assert {Ink.random(rng, unmoved_share=1.0).jitter for _ in range(20)} == {0}
    unmoved = sum(Ink.random(rng, unmoved_share=0.5).jitter == 0 for _ in range(400))
    assert 150 <= unmoved <= 250


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


def test_the_unpredictable_sample_pages_are_held_out_random_and_symbol_pages_each_named_apart():
    pages = unpredictable_sample_pages()
    assert [page.name for page in pages] == ["random 1", "symbols 1", "random 2", "symbols 2"]
    assert all(line_split(line) == "held-out" for page in pages for line in page.text.splitlines())
    assert not {page.text for page in pages} & {page.text for page in sample_pages()}
    assert [page.image.tobytes() for page in unpredictable_sample_pages(2)] == [page.image.tobytes()
                                                                               for page in pages[:2]]


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
    from utils.pages.typewriter import render_typewriter_page, typed_lines, typed_page

    text = "x = 1\n\ny = [2, 3]"
    assert typed_page(text).tobytes() == render_typewriter_page(typed_lines(text)).tobytes()


def test_a_paragraph_of_20_lines_is_typed_as_4_pages_of_the_one_shape(paragraph):
    pages = typed_pages_lines(paragraph)
    assert len(pages) == 4
    assert all(len(lines) == PAGE_ROWS and {len(line) for line in lines} == {PAGE_WIDTH} for lines in pages)
    rows = paragraph.splitlines()
    assert [[line.rstrip() for line in lines] for lines in pages] == [
        rows[0:6], rows[6:12], rows[12:18], [*rows[18:20], "", "", "", ""]]
    images = typed_pages(paragraph)
    assert [image.tobytes() for image in images] == [render_typewriter_page(lines).tobytes() for lines in pages]
    assert {image.size for image in images} == {((PAGE_WIDTH + 1) * CELL, PAGE_ROWS * CELL)}


def test_pages_break_between_rows_never_inside_a_wrapped_line():
    """A line wrapped over 8 rows goes on over the page break: page 2 opens with the 7th row, whole."""
    words = " ".join(f"wd{number:03d}" for number in range(1, 33))  # 32 words of 5 characters: 8 rows of 4
    rows = [" ".join(f"wd{number:03d}" for number in range(first, first + 4)) for first in range(1, 33, 4)]
    pages = typed_pages_lines(words + "\n\nend")
    assert [line.rstrip() for line in pages[0]] == rows[:6]
    assert [line.rstrip() for line in pages[1]] == [*rows[6:], "", "end", "", ""]
    assert typed_pages_lines("a\n" * PAGE_ROWS) == [typed_lines("a\n" * PAGE_ROWS)]  # a full page is one page


@pytest.mark.parametrize(("typed", "message"), [
    ("", "type some text: the page is empty"), (" \n\t\n", "type some text: the page is empty"),
    ("a\n" * 20 + "na\u00efve", "printable ASCII only; remove '\u00ef'"),
])
def test_typed_text_of_many_pages_names_what_cannot_be_typed(typed, message):
    with pytest.raises(ValueError, match=message):
        typed_pages_lines(typed)


def test_the_pages_own_texts_joined_are_the_typed_texts_rows(paragraph):
    """What a flawless reader writes, page by page, joins back into the typed rows: trailing spaces and the last
    page's blank rows are the pages' padding; a blank row inside the text, even at a page's end, is kept."""
    assert joined_reading([page_text(lines) for lines in typed_pages_lines(paragraph)]) == paragraph
    typed = "one\n\n\n\n\n\n\nafter six blank rows\n  indented"  # blank rows end page 1, open page 2
    assert joined_reading([page_text(lines) for lines in typed_pages_lines(typed)]) == typed
    assert joined_reading(["ab  \n    ", "  c \nd   \n    \n    "], rows=2) == "ab\n\n  c\nd"


def test_readings_of_unpadded_rows_join_into_the_typed_texts_rows(paragraph):
    """A reader of unpadded rows stops after a page's last written row: the blank rows that end a full page are given
    back, so a paragraph break at a page's end is kept; the last page's are padding."""
    typed = "one\ntwo\n\n\n\n\nafter four blank rows"  # page 1 ends with four blank rows
    for text in (paragraph, typed, "one\n\n\n\n\n\n\nafter six blank rows\n  indented"):
        pages = [joined_reading([page_text(lines)]) for lines in typed_pages_lines(text)]
        assert all(page == page.rstrip() for page in pages) and joined_reading(pages) == text
    assert joined_reading(["ab", "  c\nd"], rows=2) == "ab\n\n  c\nd"


def test_saved_pages_sort_in_reading_order(tmp_path):
    from utils.pages.typewriter import save_typed_pages

    text = "\n".join(f"row {number}" for number in range(1, 11 * PAGE_ROWS))  # 65 rows: 11 pages
    paths = save_typed_pages(text, tmp_path / "pages")
    assert [path.name for path in paths][:2] == ["page-01.png", "page-02.png"] and len(paths) == 11
    assert sorted((tmp_path / "pages").iterdir()) == paths
    assert [Image.open(path).tobytes() for path in paths] == [image.tobytes() for image in typed_pages(text)]
    with pytest.raises(ValueError, match="pages is not an empty folder"):  # a shorter text would leave pages behind
        save_typed_pages("one page", tmp_path / "pages")


def test_made_up_words_are_words_no_corpus_holds_and_a_merging_reader_learns_on_them():
    """Made-up words (`WORD_KINDS`) are letters in the shape of words, some capitalised or followed by punctuation,
    and hardly ever a corpus word (one in 30 at most): a reader of merges meets every fourth page of them."""
    import re

    from utils.pages.reading_pages import MERGING_KINDS, WORD_KINDS, _words

    corpus = {word.lower() for word in _words()}
    rows = [row for page in reading_pages(40, seed=3, kinds=WORD_KINDS) for row in page.text.split("\n")]
    words = [word for row in rows for word in row.split()]
    assert all(re.fullmatch(r"[A-Za-z]+[,.;:!?]?", word) for word in words) and len(words) > 400
    bare = [word.rstrip(",.;:!?") for word in words]
    assert sum(word.lower() in corpus for word in bare) <= len(bare) // 30
    assert any(word[0].isupper() for word in bare) and any(word != bare_word for word, bare_word in zip(words, bare))
    assert MERGING_KINDS[3::4] == WORD_KINDS * (len(MERGING_KINDS) // 4)


def test_layout_rows_are_laid_out_with_spaces_and_pages_written_so_fit_the_page():
    """The layout kind gives what a reader of unpadded rows must place from the page alone: rows indented by 1-8
    spaces, runs of at least two spaces inside a row, and centred titles; every row fits the page. The pages written
    by hand that are laid out so fit the one page shape too."""
    import re

    from utils.pages.reading_pages import LAYOUT_KINDS, reading_pages
    from utils.pages.written_pages import LAYOUT_TEXTS, written_pages

    rows = [row.rstrip() for page in reading_pages(40, seed=3, kinds=LAYOUT_KINDS) for row in page.text.split("\n")]
    indents = {len(row) - len(row.lstrip(" ")) for row in rows if row.strip()}
    assert {0, 1, 2, 4, 8} <= indents and max(indents) <= PAGE_WIDTH
    assert sum(bool(re.search(r"\S {2,}\S", row)) for row in rows) >= len(rows) // 10
    assert all(len(row) <= PAGE_WIDTH for row in rows)
    pages = written_pages(LAYOUT_TEXTS)
    assert [page.name for page in pages] == list(LAYOUT_TEXTS) and all(page.image.size == pages[0].image.size
                                                                      for page in pages)
