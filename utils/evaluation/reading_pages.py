"""Generated pages to learn reading from and to measure it on: short lines of words and numbers, in kinds.

Every page is drawn from a seed (the same seed gives the same page everywhere) and rendered with the suite's
font (`utils.evaluation.pages.render_page`). Words come from the shipped corpus; numbers, amounts, dates and
percentages are random. Each line belongs to one split by a hash of its text, so a held-out page shows only
lines that no training page can show: "text never seen in training" holds by construction, whatever the
number of training pages.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

import numpy as np

from utils.evaluation.pages import CORPUS_PATH, SamplePage, render_page

__all__ = ["PAGE_KINDS", "SPLITS", "ReadingPage", "iter_reading_pages", "reading_pages", "line_split"]

PAGE_KINDS = ("prose", "numbers", "receipt", "table", "form")
SPLITS = ("train", "held-out")
_HELD_OUT_SHARE = 8  # one line in 8 belongs to the held-out split
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


def _some_words(rng: np.random.Generator, count: int) -> str:
    words = _words()
    return " ".join(words[index] for index in rng.integers(0, len(words), count))


def _line(kind: str, rng: np.random.Generator) -> str:
    if kind == "prose":
        words = _some_words(rng, int(rng.integers(2, 6)))
        return words[0].upper() + words[1:] + str(rng.choice(["", ".", ","]))
    if kind == "numbers":
        return " ".join(_number(rng) for _ in range(int(rng.integers(2, 5))))
    if kind == "receipt":
        item = _some_words(rng, int(rng.integers(1, 3))).capitalize()
        return f"{item} {rng.integers(0, 100)}.{rng.integers(0, 100):02d}"
    if kind == "table":
        cells = [_some_words(rng, 1).capitalize()] + [_number(rng) for _ in range(int(rng.integers(1, 3)))]
        return "| " + " | ".join(cells) + " |"
    if kind == "form":
        label = _some_words(rng, 1).upper()
        return f"{label}: {_some_words(rng, 2).title() if rng.integers(0, 2) else _number(rng)}"
    raise ValueError(f"unknown page kind {kind!r}; the kinds are {', '.join(PAGE_KINDS)}")


def line_split(line: str) -> str:
    """The split a line belongs to ("train" or "held-out"), from a hash of its text."""
    return SPLITS[zlib.crc32(line.encode("utf-8")) % _HELD_OUT_SHARE == 0]


def iter_reading_pages(*, seed: int, split: str = "train", max_lines: int = 3,
                       kinds: tuple[str, ...] = PAGE_KINDS) -> Iterator[ReadingPage]:
    """Generated pages of one split without end, kinds in turn, each of 1 to `max_lines` lines.

    Args:
        seed: the text and layout of every page are a function of the seed.
        split: "train" or "held-out": every line of a page belongs to this split (`line_split`).
        max_lines: lines per page, drawn in [1, max_lines].
        kinds: the page kinds to cycle through (`PAGE_KINDS`).

    Yields:
        `ReadingPage`s named by kind.
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: choose one of {', '.join(SPLITS)}")
    if max_lines < 1:
        raise ValueError(f"max_lines={max_lines} must be >= 1")
    rng = np.random.default_rng([seed, SPLITS.index(split)])
    for kind in itertools.cycle(kinds):
        lines = []
        for _ in range(int(rng.integers(1, max_lines + 1))):
            line = _line(kind, rng)
            while line_split(line) != split:
                line = _line(kind, rng)
            lines.append(line)
        text = "\n".join(lines)
        yield ReadingPage(kind, text, render_page(text, chars_per_line=len(max(lines, key=len))))


def reading_pages(count: int, *, seed: int, split: str = "train", max_lines: int = 3,
                  kinds: tuple[str, ...] = PAGE_KINDS) -> list[ReadingPage]:
    """The first `count` pages of `iter_reading_pages` with these options."""
    return list(itertools.islice(iter_reading_pages(seed=seed, split=split, max_lines=max_lines, kinds=kinds), count))
