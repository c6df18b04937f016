"""The held-out pages where a tiny reader is most easily wrong, and how to score its readings of them.

Two kinds (`utils.evaluation.reading_pages.HARD_KINDS`), both text no language prior can predict:

- **Look-alike glyphs** (`look_alike_pages`): strings drawn from the classes of `LOOK_ALIKE_CLASSES` (0/O/o,
  1/I/l/|, brackets, +/x, n/m, ...) at every glyph size of the atlas. `glyph_confusion` aligns each reading to its
  page and counts which character was read for which: a confusion matrix, and the accuracy of every class.
- **Rows of digits** (`digit_grid_pages`): grids of digit groups where a group often repeats one just written, so
  only the page says where a row ends. A reader that loses its place there skips or repeats a row, or runs on to
  its budget (`utils.tiny.reading_report` counts both).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from utils.evaluation.character_error_rate import alignment
from utils.evaluation.reading_pages import LOOK_ALIKE_CLASSES, ReadingPage, reading_pages
from utils.evaluation.typewriter import GLYPH_SIZES, Ink, render_typewriter_page

__all__ = ["LOOK_ALIKE_PAGES_PER_SIZE", "DIGIT_GRID_PAGES", "GlyphConfusion", "look_alike_pages", "digit_grid_pages",
           "glyph_confusion"]

LOOK_ALIKE_PAGES_PER_SIZE = 3  # held-out look-alike pages drawn at each of the atlas's 7 glyph sizes
DIGIT_GRID_PAGES = 20  # held-out pages of digit rows
MISSING = "∅"  # what the confusion matrix shows for a page character the reading left out


def look_alike_pages(per_size: int = LOOK_ALIKE_PAGES_PER_SIZE, *, seed: int = 0) -> list[ReadingPage]:
    """Held-out pages of look-alike strings, `per_size` at every glyph size of the atlas (`GLYPH_SIZES`), in the
    sample pages' black on white: the glyph, at its size, is all that tells one character from another."""
    texts = reading_pages(per_size * len(GLYPH_SIZES), seed=seed, split="held-out", kinds=("look-alikes",))
    return [ReadingPage(page.kind, page.text,
                        render_typewriter_page(page.text.split("\n"), Ink(size=GLYPH_SIZES[index // per_size])))
            for index, page in enumerate(texts)]


def digit_grid_pages(count: int = DIGIT_GRID_PAGES, *, seed: int = 0) -> list[ReadingPage]:
    """Held-out pages of digit rows (`digit-grid`: one group length and separator per page, groups repeated)."""
    return reading_pages(count, seed=seed, split="held-out", kinds=("digit-grid",))


@dataclass(frozen=True)
class GlyphConfusion:
    """How often each look-alike character of the pages was read as what (aligned by fewest edits)."""

    counts: dict[tuple[str, str], int]  # (page character, character read or MISSING) -> times

    def accuracy(self, glyphs: str) -> float:
        """The share of the pages' `glyphs` that were read as themselves."""
        seen = sum(times for (page, _), times in self.counts.items() if page in glyphs)
        right = sum(times for (page, read), times in self.counts.items() if page in glyphs and page == read)
        return right / seen if seen else float("nan")

    def by_class(self) -> dict[str, float]:
        """Accuracy of every class of `LOOK_ALIKE_CLASSES`, per character of the class."""
        return {glyphs: self.accuracy(glyphs) for glyphs in LOOK_ALIKE_CLASSES}

    def worst_class(self) -> tuple[str, float]:
        """The class read least accurately, and its accuracy."""
        return min(self.by_class().items(), key=lambda item: item[1])

    def characters(self) -> int:
        """Look-alike characters on the pages."""
        return sum(self.counts.values())

    def mistakes(self) -> list[tuple[str, str, int]]:
        """(page character, character read, times) for every confusion, the most frequent first."""
        return sorted(((page, read, times) for (page, read), times in self.counts.items() if page != read),
                      key=lambda item: (-item[2], item[0], item[1]))

    def matrix(self) -> tuple[list[str], list[str], np.ndarray]:
        """(rows: the look-alike characters, columns: those and every other character read, counts [rows, columns])."""
        rows = list(dict.fromkeys("".join(LOOK_ALIKE_CLASSES)))
        columns = rows + sorted({read for (_, read) in self.counts} - set(rows))
        table = np.zeros((len(rows), len(columns)), dtype=np.int64)
        for (page, read), times in self.counts.items():
            table[rows.index(page), columns.index(read)] += times
        return rows, columns, table


def glyph_confusion(pairs: Iterable[tuple[str, str]]) -> GlyphConfusion:
    """Counts, over (reading, page text) pairs, what each look-alike character of the pages was read as."""
    look_alikes = set("".join(LOOK_ALIKE_CLASSES))
    counts = Counter((page, read or MISSING) for read_text, truth in pairs
                     for page, read in alignment(read_text, truth) if page in look_alikes)
    return GlyphConfusion(dict(counts))
