"""Generated typewriter pages to learn reading from and to measure it on, in seven kinds.

Every page is drawn from a seed (the same seed gives the same page everywhere) as a typewriter page
(`utils.evaluation.typewriter`): one character per image token, read row by row. Words come from the shipped
corpus; names, numbers, amounts, dates and percentages are random. Each row belongs to one split by a hash of
its text, so a held-out page shows only rows that no training page can show: "text never seen in training"
holds by construction, whatever the number of training pages. No row of a sample page
(`utils.evaluation.pages.sample_rows`) is ever generated.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache

import numpy as np

from utils.evaluation.pages import CORPUS_PATH, SamplePage, sample_rows
from utils.evaluation.typewriter import PAGE_ROWS, PAGE_WIDTH, Ink, fit_page, page_text, render_typewriter_page

__all__ = ["PAGE_KINDS", "SPLITS", "SAMPLE_SEED", "ReadingPage", "iter_reading_pages", "reading_pages", "line_split",
           "sample_pages"]

SPLITS = ("train", "held-out")
_HELD_OUT_SHARE = 8  # one row in 8 belongs to the held-out split
_MAX_WORD_LENGTH = 10


@dataclass(frozen=True)
class ReadingPage(SamplePage):
    """A generated page: `name` is its kind."""

    @property
    def kind(self) -> str:
        return self.name


@cache
def _words() -> tuple[str, ...]:
    text = CORPUS_PATH.read_text(encoding="utf-8")
    return tuple(sorted({word for word in re.findall(r"[A-Za-z][a-z]+", text) if len(word) <= _MAX_WORD_LENGTH}))


def _word(rng: np.random.Generator) -> str:
    words = _words()
    return words[int(rng.integers(0, len(words)))]


def _number(rng: np.random.Generator) -> str:
    form = int(rng.integers(0, 5))
    if form == 0:
        return str(rng.integers(1, 1000))
    if form == 1:
        return f"{rng.integers(0, 1000)}.{rng.integers(0, 100):02d}"
    if form == 2:
        return f"{rng.integers(1, 100)},{rng.integers(0, 1000):03d}"
    if form == 3:
        return f"{rng.integers(1, 29)}/{rng.integers(1, 13)}/20{rng.integers(10, 30)}"
    return f"{rng.choice(['+', '-'])}{rng.integers(0, 20)}.{rng.integers(0, 10)}%"


def _amount(rng: np.random.Generator) -> str:
    return f"{rng.integers(0, 100)}.{rng.integers(0, 100):02d}"


def _wrapped(tokens: Callable[[], str], width: int) -> Callable[[], str]:
    """Rows of words from `tokens`, each as long as fits in `width` characters."""
    def row() -> str:
        line = tokens()[:width]
        while True:
            word = tokens()
            if len(line) + 1 + len(word) > width:
                return line
            line += " " + word
    return row


def _prose(rng, width):
    row = _wrapped(lambda: _word(rng), width)
    return lambda: (lambda line: line[0].upper() + line[1:])(row())


def _numbers(rng, width):
    return _wrapped(lambda: _number(rng), width)


def _receipt(rng, width):
    def row():
        item = " ".join(_word(rng) for _ in range(int(rng.integers(1, 3)))).capitalize()
        amount = _amount(rng)
        return item[:width - len(amount) - 1].ljust(width - len(amount)) + amount
    return row


def _fitting(make: Callable[[], str], width: int) -> str:
    """The first of a few rows from `make` that fits in `width` characters, else the last one cut to it."""
    for _ in range(8):
        line = make()
        if len(line) <= width:
            return line
    return line[:width]


def _table(rng, width):
    cells = 3 if width >= 31 else 2
    inner = (width - 1) // cells - 3  # "| " + cell + " " per column, then the closing "|"
    def row():
        values = [_fitting(lambda: _word(rng).capitalize(), inner)]
        values += [_fitting(lambda: _number(rng), inner) for _ in range(cells - 1)]
        return "|" + "".join(f" {value.ljust(inner)} |" for value in values)
    return row


def _form(rng, width):
    def row():
        label = _word(rng).upper() + ":"
        value = " ".join(_word(rng).title() for _ in range(2)) if rng.integers(0, 2) else _number(rng)
        return f"{label} {value}"
    return lambda: _fitting(row, width)


def _letter(rng, width):
    body = _prose(rng, width)
    def row():
        form = int(rng.integers(0, 6))
        if form == 0:
            return f"Dear {rng.choice(['Ms', 'Mr', 'Dr'])} {_word(rng).capitalize()},"[:width]
        if form == 1:
            return f"Yours, {_word(rng).capitalize()}"[:width]
        return body()
    return row


def _two_columns(rng, width):
    column = (width - 3) // 2
    left, right = _prose(rng, column), _prose(rng, column)
    return lambda: left().ljust(column) + "   " + right()


# kind -> rows of a page of that kind, `PAGE_WIDTH` characters wide
_KINDS = {"prose": _prose, "numbers": _numbers, "receipt": _receipt, "table": _table, "form": _form,
          "letter": _letter, "two-columns": _two_columns}
PAGE_KINDS = tuple(_KINDS)


def line_split(line: str) -> str:
    """The split a row belongs to ("train" or "held-out"), from a hash of its text (trailing spaces ignored)."""
    return SPLITS[zlib.crc32(line.rstrip().encode("utf-8")) % _HELD_OUT_SHARE == 0]


def _page_lines(kind: str, rng: np.random.Generator, *, split: str) -> list[str]:
    row, excluded = _KINDS[kind](rng, PAGE_WIDTH), sample_rows()
    lines = []
    while len(lines) < PAGE_ROWS:
        line = row()
        if line.strip() and line_split(line) == split and line.rstrip() not in excluded:
            lines.append(line)
    return fit_page(lines)


def iter_reading_pages(*, seed: int, split: str = "train",
                       kinds: tuple[str, ...] = PAGE_KINDS, ink: Callable[[np.random.Generator], Ink] | None = None
                       ) -> Iterator[ReadingPage]:
    """Generated pages of one split without end, kinds in turn, each of the one shape (`PAGE_ROWS` x `PAGE_WIDTH`).

    Args:
        seed: the text and look of every page are a function of the seed.
        split: "train" or "held-out": every row of a page belongs to this split (`line_split`).
        kinds: the page kinds to cycle through (`PAGE_KINDS`).
        ink: rng -> how a page is inked (for example `Ink.random`, as training does); None: the sample pages' ink.

    Yields:
        `ReadingPage`s named by kind; `text` is what a reader should write (`page_text`).
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: choose one of {', '.join(SPLITS)}")
    unknown = [kind for kind in kinds if kind not in _KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown page kinds {unknown}; the kinds are {', '.join(PAGE_KINDS)}")
    rng = np.random.default_rng([seed, SPLITS.index(split)])
    for kind in itertools.cycle(kinds):
        lines = _page_lines(kind, rng, split=split)
        image = render_typewriter_page(lines, ink(rng) if ink else None)
        yield ReadingPage(kind, page_text(lines), image)


def reading_pages(count: int, *, seed: int, split: str = "train",
                  kinds: tuple[str, ...] = PAGE_KINDS) -> list[ReadingPage]:
    """The first `count` pages of `iter_reading_pages` with these options (sample-page ink)."""
    return list(itertools.islice(iter_reading_pages(seed=seed, split=split, kinds=kinds), count))


SAMPLE_SEED = 1  # the seed of the sample pages' held-out stream (`measure_reading` reads seed 0's)


def sample_pages() -> list[SamplePage]:
    """The ten sample pages, in a fixed order: generated typewriter pages of the held-out split (the seven kinds,
    then prose, numbers and a receipt again), which the shipped tiny pair reads and no training page shows."""
    pages, seen = [], {}
    for page in reading_pages(10, seed=SAMPLE_SEED, split="held-out"):
        seen[page.kind] = seen.get(page.kind, 0) + 1
        name = page.kind if seen[page.kind] == 1 else f"{page.kind} {seen[page.kind]}"
        pages.append(SamplePage(name, page.text, page.image))
    return pages
