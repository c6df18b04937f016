"""The hard held-out pages (look-alike glyphs at every size, digit grids) and how their readings are scored."""

import re

import numpy as np
import pytest

from utils.evaluation.character_error_rate import alignment, substitutions
from utils.evaluation.glyph_confusion import MISSING, glyph_confusion
from utils.pages.hard_pages import digit_grid_pages, look_alike_pages
from utils.pages.reading_pages import (HARD_KINDS, LOOK_ALIKE_CLASSES, REFINING_KINDS, TRAINING_KINDS, line_split,
                                       reading_pages)
from utils.pages.typewriter import GLYPH_SIZES, PAGE_ROWS, PAGE_WIDTH, render_typewriter_page


def test_alignment_pairs_every_character_of_both_sides():
    assert alignment("abd", "abcd") == [("a", "a"), ("b", "b"), ("c", ""), ("d", "d")]
    assert alignment("abxcd", "abcd") == [("a", "a"), ("b", "b"), ("", "x"), ("c", "c"), ("d", "d")]
    assert alignment("0Il", "O1l") == [("O", "0"), ("1", "I"), ("l", "l")]
    assert alignment("", "ab") == [("a", ""), ("b", "")]
    for read, truth in [("x = {-B}", "x = (-b)"), ("1234 1234", "1234 5678 1234"), ("", ""), ("kqrt", "sqrt")]:
        pairs = alignment(read, truth)
        assert "".join(page for page, _ in pairs) == truth and "".join(seen for _, seen in pairs) == read
        assert substitutions(read, truth) == [(page, seen) for page, seen in pairs if page and seen and page != seen]


def test_glyph_confusion_counts_what_each_look_alike_was_read_as():
    confusion = glyph_confusion([("0Oo IIl|", "0Oo 1Il|"), ("(x)", "{x}"), ("nm", "nmm")])
    assert confusion.counts[("1", "I")] == 1 and confusion.counts[("{", "(")] == 1 and confusion.counts[("}", ")")] == 1
    assert confusion.counts[("m", MISSING)] == 1  # a look-alike the reading left out is a mistake too
    assert confusion.accuracy("0Oo") == 1.0
    assert confusion.accuracy("1Il|") == pytest.approx(3 / 4)
    assert confusion.accuracy("({[") == 0.0
    assert confusion.worst_class() in [("({[", 0.0), (")}]", 0.0)]
    assert confusion.characters() == 3 + 4 + 3 + 3  # ' ' is no look-alike; 'x' is ('+x')
    assert confusion.mistakes()[0][2] == 1 and all(page != read for page, read, _ in confusion.mistakes())
    rows, columns, table = confusion.matrix()
    assert rows[:3] == ["0", "O", "o"] and columns[:len(rows)] == rows and MISSING in columns
    assert table.sum() == confusion.characters()
    assert table[rows.index("1"), columns.index("I")] == 1 and table[rows.index("l"), columns.index("l")] == 1


def test_refining_kinds_alternate_the_hard_kinds_with_every_training_kind():
    assert REFINING_KINDS[1::2] == TRAINING_KINDS
    assert set(REFINING_KINDS[0::2]) == set(HARD_KINDS)
    pages = reading_pages(len(HARD_KINDS) * 6, seed=3, kinds=HARD_KINDS)
    assert len({page.text for page in pages}) == len(pages)
    assert [page.kind for page in pages[:4]] == list(HARD_KINDS)
    again = reading_pages(len(HARD_KINDS) * 6, seed=3, kinds=HARD_KINDS)
    assert [page.text for page in again] == [page.text for page in pages]
    for page in pages:
        rows = page.text.split("\n")
        assert len(rows) == PAGE_ROWS and all(len(row) == PAGE_WIDTH for row in rows)
        assert all(line_split(row) == "train" for row in rows if row.strip())


def test_look_alike_pages_hold_only_look_alikes_at_every_glyph_size():
    pages = look_alike_pages(2)
    assert len(pages) == 2 * len(GLYPH_SIZES)
    allowed = set("".join(LOOK_ALIKE_CLASSES)) | {" ", "\n"}
    assert all(set(page.text) <= allowed for page in pages)
    assert all(line_split(row) == "held-out" for page in pages for row in page.text.split("\n") if row.strip())
    assert len({page.image.size for page in pages}) == 1
    # the same text drawn at the sample pages' size differs from the smallest and the largest glyphs
    ink = [np.asarray(page.image).mean() for page in pages]
    sample = [np.asarray(render_typewriter_page(page.text.split("\n"))).mean() for page in pages]
    assert ink[0] > sample[0] > ink[-1]  # 18 px glyphs hold less ink than 22 px ones, 24 px ones more


def test_digit_grids_repeat_groups_so_only_the_page_says_where_a_row_ends():
    pages = digit_grid_pages(12)
    repeated = 0
    for page in pages:
        rows = [row.rstrip() for row in page.text.split("\n") if row.strip()]
        assert all(re.fullmatch(r"[0-9 ,.|-]+", row) for row in rows), page.text
        groups = re.findall(r"[0-9]+", page.text)
        repeated += len(groups) != len(set(groups))
    assert repeated >= len(pages) // 2


def test_read_hard_pages_scores_a_reading_that_confuses_and_runs_on():
    """A stand-in pipeline that reads every page right but for '(' as '{', and never ends the digit grids."""
    from types import SimpleNamespace

    from utils.tiny.reading_report import read_hard_pages

    texts = {page.image.tobytes(): page for page in [*look_alike_pages(1), *digit_grid_pages(3)]}

    class Reader:
        eos_token_ids = (2,)

        def generate(self, image, **options):
            page = texts[image.tobytes()]
            grid = page.kind == "digit-grid"
            text = page.text if grid else page.text.replace("(", "{")
            tokens = [5] * len(text) + ([] if grid else [2])
            return SimpleNamespace(texts=[text], tokens=tokens, drafted=False,
                                   metrics=SimpleNamespace(steps=[]))

    figures = read_hard_pages(Reader(), per_size=1, grids=3)
    look = figures["look_alikes"]
    assert look["pages"] == len(GLYPH_SIZES) and look["reached_budget"] == 0
    assert look["accuracy_by_class"]["0Oo"] == 1.0
    opening = sum(page.text.count(char) for page in look_alike_pages(1) for char in "({[")
    assert look["worst_class"] == "({[" and look["worst_class_accuracy"] == pytest.approx(
        1 - sum(page.text.count("(") for page in look_alike_pages(1)) / opening, abs=1e-4)
    assert look["confusions"][0][:2] == ["(", "{"]
    grid = figures["digit_grids"]
    assert grid == {"cer": 0.0, "distinct_answers": 3, "row_slips": 0, "reached_budget": 3, "pages": 3}


@pytest.mark.slow
def test_the_hard_pages_command_prints_both_kinds_at_both_precisions(capsys, tmp_path):
    import json

    from benchmarks.hard_pages import main

    assert main(["--per-size", "1", "--grids", "2", "--json", str(tmp_path / "hard.json")]) == 0
    printed = capsys.readouterr().out
    assert printed.count("look-alike glyphs (7 pages") == 2 and printed.count("digit grids (2 pages)") == 2
    figures = json.loads((tmp_path / "hard.json").read_text())
    assert set(figures) == {"default", "f32"}
    assert set(figures["f32"]["look_alikes"]["accuracy_by_class"]) == set(LOOK_ALIKE_CLASSES)
    assert 0 <= figures["f32"]["digit_grids"]["reached_budget"] <= 2


def test_hard_page_texts_never_show_a_sample_row():
    from utils.pages.samples import sample_rows

    rows = {row.rstrip() for page in reading_pages(40, seed=0, kinds=HARD_KINDS) for row in page.text.split("\n")}
    assert not rows & sample_rows()
