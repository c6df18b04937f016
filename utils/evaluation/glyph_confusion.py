"""How a reading of look-alike glyphs went wrong: `glyph_confusion` aligns each reading to its page
(`utils.pages.hard_pages.look_alike_pages`) and counts which character was read for which, a confusion matrix and
the accuracy of every class of `LOOK_ALIKE_CLASSES`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from utils.evaluation.character_error_rate import alignment
from utils.pages.reading_pages import LOOK_ALIKE_CLASSES

__all__ = ["MISSING", "GlyphConfusion", "glyph_confusion"]

MISSING = "∅"  # what the confusion matrix shows for a page character the reading left out


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
