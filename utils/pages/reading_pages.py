"""Generated typewriter pages to learn reading from and to measure it on: seven kinds of documents, and five
kinds of text that no language model can predict.

Every page is drawn from a seed (the same seed gives the same page everywhere) as a typewriter page
(`utils.pages.typewriter`): one character per image token, read row by row. The seven document kinds (`PAGE_KINDS`)
take their words from the shipped corpus; names, numbers, amounts, dates and percentages are random. The
unpredictable kinds (`UNPREDICTABLE_KINDS`: uniformly random printable ASCII, code with made-up names, bordered
tables, symbol runs, mixed-case strings) give a reader nothing to recite: it must read every glyph and keep its
place by where it is on the page, not by what it expects to write. A reader trains on both (`TRAINING_KINDS`), and
on pages with blank rows and short lines (`sparse_share`), which any text that fits the grid gives; a reader of
merged tokens also on rows laid out with runs of spaces (`LAYOUT_KINDS`) and on made-up words (`WORD_KINDS`), whose
letters it must read because no corpus taught it the words (`MERGING_KINDS`). Each row belongs to one split by a
hash of its text, so a held-out page shows only rows that no training page can show: "text never seen in training"
holds by construction, whatever the number of training pages. No row of a sample page
(`utils.pages.samples.sample_rows`) is ever generated.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache

import numpy as np

from utils.pages.samples import CORPUS_PATH, SamplePage, sample_rows
from utils.pages.typewriter import GLYPHS, PAGE_ROWS, PAGE_WIDTH, Ink, fit_page, page_text, render_typewriter_page

__all__ = ["PAGE_KINDS", "UNPREDICTABLE_KINDS", "TRAINING_KINDS", "HARD_KINDS", "REFINING_KINDS", "LAYOUT_KINDS",
           "WORD_KINDS", "MERGING_KINDS", "LOOK_ALIKE_CLASSES", "SPLITS", "SAMPLE_SEED", "SAMPLE_PAGE_COUNT",
           "ReadingPage", "iter_reading_pages", "reading_pages", "line_split", "sample_pages",
           "unpredictable_sample_pages"]

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


def _random_ascii(rng, width):
    """Uniformly random printable ASCII and spaces, each row a random length: nothing to predict."""
    alphabet = GLYPHS + " " * 8
    def row():
        length = int(rng.integers(width // 2, width + 1))
        return "".join(alphabet[i] for i in rng.integers(0, len(alphabet), size=length)).strip() or "?"
    return row


def _name(rng: np.random.Generator, low: int = 1, high: int = 7) -> str:
    """A made-up identifier: letters (and a digit now and then) no corpus holds."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    name = "".join(letters[i] for i in rng.integers(0, 26, size=int(rng.integers(low, high + 1))))
    return name + (str(rng.integers(0, 10)) if rng.integers(0, 4) == 0 else "")


def _code(rng, width):
    """Lines of Python-like code with made-up names, operators, brackets and numbers."""
    def statement():
        a, b, c = _name(rng), _name(rng), _name(rng)
        n = int(rng.integers(0, 1000))
        op = str(rng.choice(["+", "-", "*", "/", "%", "//", "**", "&", "|", "^"]))
        cmp = str(rng.choice(["==", "!=", "<", ">", "<=", ">="]))
        forms = [f"def {a}({b}, {c}):", f"{a} = {b} {op} {n}", f"for {a} in range({b}):", f"if {a} {cmp} {n}:",
                 f"return {a}[{b}] {op} {c}", f"{a}.{b}({c}, {n})", f"{a} += {{'{b}': {n}}}", f"while {a} {cmp} {b}:",
                 f"print(f\"{{{a}}}: {n}\")", f"{a} = [{b} for {b} in {c}]", f"import {a}", f"# {a} {b} {c}",
                 f"{a}[{n}:] = {b}.{c}()", f"assert {a} {cmp} {b}, {n}"]
        return forms[int(rng.integers(0, len(forms)))]
    return lambda: _fitting(lambda: " " * (4 * int(rng.integers(0, 3))) + statement(), width)


def _bordered_table(rng, width):
    """A table with `+---+` borders and `|` cells of made-up names, codes and numbers."""
    cells = int(rng.integers(2, 4))
    inner = (width - 1) // cells - 3
    def value():
        form = int(rng.integers(0, 3))
        return _name(rng, 1, inner) if form == 0 else _number(rng) if form == 1 else _name(rng, 1, 3).upper() + str(
            rng.integers(0, 100))
    def row():
        if rng.integers(0, 3) == 0:
            return "+" + "".join("-" * (inner + 2) + "+" for _ in range(cells))
        return "|" + "".join(f" {_fitting(value, inner).ljust(inner)} |" for _ in range(cells))
    return row


def _symbols(rng, width):
    """Runs of punctuation and symbols, with a few digits and letters between them."""
    punctuation = "".join(char for char in GLYPHS if not char.isalnum())
    def run() -> str:
        pool = punctuation if rng.integers(0, 4) else GLYPHS
        return "".join(pool[i] for i in rng.integers(0, len(pool), size=int(rng.integers(1, 9))))
    return _wrapped(run, width)


# Syllables of made-up words that look like English ones: the merges a tokenizer learnt from words, in words no
# corpus holds, so that a reader of merged tokens reads their letters instead of recalling the words it knows.
_ONSETS = ("", "b", "bl", "br", "c", "ch", "cl", "cr", "d", "dr", "f", "fl", "fr", "g", "gl", "gr", "h", "j", "k", "l",
           "m", "n", "p", "pl", "pr", "qu", "r", "s", "sh", "sk", "sl", "sp", "st", "str", "t", "th", "tr", "v", "w",
           "wh", "y", "z")
_VOWELS = ("a", "e", "i", "o", "u", "y", "ai", "ea", "ee", "ie", "oa", "oo", "ou")
_CODAS = ("", "", "b", "ck", "d", "ff", "g", "ll", "lt", "m", "n", "nd", "ng", "nk", "nt", "p", "r", "rd", "s", "ss",
          "st", "t", "tch", "th", "x", "ze")


def _made_up_words(rng, width):
    """Made-up words of one to three syllables (`_ONSETS`, `_VOWELS`, `_CODAS`), some capitalised, some followed by
    punctuation: letters in the shapes of words, none of them a corpus word a reader could recall."""
    def word() -> str:
        text = "".join(str(rng.choice(_ONSETS)) + str(rng.choice(_VOWELS)) + str(rng.choice(_CODAS))
                       for _ in range(int(rng.choice([1, 2, 3], p=[0.45, 0.4, 0.15]))))
        text = text.capitalize() if rng.integers(0, 4) == 0 else text
        return text + (str(rng.choice([",", ".", ";", ":", "!", "?"])) if rng.integers(0, 6) == 0 else "")
    return _wrapped(word, width)


def _mixed_case(rng, width):
    """Strings of letters in random case with digits: like serial numbers, keys and passwords."""
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return _wrapped(lambda: "".join(alphabet[i] for i in rng.integers(0, len(alphabet), size=int(rng.integers(2, 11)))),
                    width)


# Glyphs a reader at 18-24 px takes for one another unless it is taught to tell them apart: digits and letters,
# brackets, operators, and letter pairs that read as one letter ("rn" as "m").
LOOK_ALIKE_CLASSES = ("0Oo", "1Il|", "2Zz", "5Ss", "8B", "6b", "9g", "({[", ")}]", "+x", "&k", "<=", "!l", "-~",
                      "nm", "rnm")


def _look_alikes(rng, width):
    """Groups of characters drawn from one or two look-alike classes at a time: nothing but the glyph tells them
    apart, so a reader must look at every one."""
    def group() -> str:
        pool = "".join(LOOK_ALIKE_CLASSES[i] for i in rng.integers(0, len(LOOK_ALIKE_CLASSES), size=2))
        return "".join(pool[i] for i in rng.integers(0, len(pool), size=int(rng.integers(1, 9))))
    return _wrapped(group, width)


def _digit_grid(rng, width):
    """Rows of digit groups of one layout per page (group length, separator), as account numbers, serials and
    tables of figures are; a group often repeats one just written, so only the page says where a row ends."""
    length = int(rng.choice([2, 3, 4, 5, 6, 8, 10, 12]))
    separator = str(rng.choice([" ", "  ", ",", "-", " | ", "."]))
    groups: list[str] = []
    def row() -> str:
        line = ""
        while True:
            if groups and rng.random() < 0.3:
                value = groups[-int(rng.integers(1, min(len(groups), 4) + 1))]
            else:
                value = "".join(str(digit) for digit in rng.integers(0, 10, size=length))
            candidate = value if not line else line + separator + value
            if len(candidate) > width:
                return line or value[:width]
            line = candidate
            groups.append(value)
    return row


def _repeats(rng, width):
    """Rows that repeat themselves: dot leaders, runs of one separator, a word over and over, a short pattern,
    or the row just written again. A reader keeps its place by the page, never by what comes next in the text."""
    previous: list[str] = []
    def row() -> str:
        form = int(rng.integers(0, 6))
        if previous and form == 0:
            return previous[-1]
        if form == 1:
            label, figure = _word(rng).capitalize(), _number(rng)
            dots = int(rng.integers(3, max(4, width - len(label) - len(figure) - 1)))
            line = f"{label} {'.' * dots} {figure}"
        elif form == 2:
            line = str(rng.choice(list("-=_*.~#+"))) * int(rng.integers(3, width + 1))
        elif form == 3:
            word = _word(rng) if rng.integers(0, 2) else _name(rng, 1, 4)
            line = " ".join([word] * int(rng.integers(2, width // (len(word) + 1) + 2)))
        else:
            unit = "".join(str(rng.choice(list("-=+*.:|/\\<>o0x"))) for _ in range(int(rng.integers(1, 4))))
            line = unit * int(rng.integers(2, width // len(unit) + 1))
        previous.append(line[:width].rstrip() or line[:1])
        return previous[-1]
    return row


def _formulas(rng, width):
    """Made-up formulas: short names, digits, brackets of three kinds and the operators that look alike."""
    def term() -> str:
        name = _name(rng, 1, 2)
        forms = (lambda: str(rng.integers(0, 100)), lambda: f"{name}^{rng.integers(2, 4)}",
                 lambda: f"{rng.choice(['sqrt', 'log', 'f', 'g', 'sin'])}({name})",
                 lambda: f"{{{name}}}" if rng.integers(0, 2) else f"[{name}]",
                 lambda: f"{rng.integers(1, 10)}{name}", lambda: name)
        return forms[int(rng.integers(0, len(forms)))]()
    def row() -> str:
        operators = ["+", "-", "*", "/", "x", "&", "<", "<=", "=", "!=", "~", "+/-", "|"]
        parts = [term()]
        for _ in range(int(rng.integers(1, 5))):
            parts += [str(rng.choice(operators)), term()]
        line = " ".join(parts)
        return f"({line})" if rng.integers(0, 4) == 0 else line
    return lambda: _fitting(row, width)


def _layout(rng, width):
    """Rows laid out with spaces, as people type them: indented by 1-8 spaces (lists, outlines, nested keys),
    columns aligned by runs of 2-6 spaces, and titles centred in the row. A reader that writes a page's text, not its
    padding, must count those spaces from the page: nothing in the words says how many there are."""
    def indented() -> str:
        indent = int(rng.integers(1, 9))
        marker = str(rng.choice(["- ", "* ", "", "", f"{rng.integers(1, 10)}. "]))
        words = " ".join(_word(rng) for _ in range(int(rng.integers(1, 4))))
        return " " * indent + _fitting(lambda: marker + words, width - indent)

    def nested_key() -> str:
        indent = 2 * int(rng.integers(0, 4))
        value = _word(rng) if rng.integers(0, 2) else _number(rng)
        return " " * indent + _fitting(lambda: f"{_word(rng)}: {value}", width - indent)

    def columns() -> str:
        fields = [_word(rng) if rng.integers(0, 2) else _number(rng) for _ in range(int(rng.integers(2, 4)))]
        line = fields[0]
        for field in fields[1:]:
            line += " " * int(rng.integers(2, 7)) + field
        return line[:width].rstrip()

    def centred() -> str:
        title = _fitting(lambda: " ".join(_word(rng).capitalize() for _ in range(int(rng.integers(1, 3)))), width - 2)
        return title.center(width).rstrip()

    forms = (indented, nested_key, columns, centred)
    return lambda: forms[int(rng.integers(0, len(forms)))]()


# kind -> rows of a page of that kind, `PAGE_WIDTH` characters wide
_KINDS = {"prose": _prose, "numbers": _numbers, "receipt": _receipt, "table": _table, "form": _form,
          "letter": _letter, "two-columns": _two_columns, "random": _random_ascii, "code": _code,
          "bordered-table": _bordered_table, "symbols": _symbols, "mixed-case": _mixed_case,
          "look-alikes": _look_alikes, "digit-grid": _digit_grid, "repeats": _repeats, "formulas": _formulas,
          "layout": _layout, "made-up-words": _made_up_words}
PAGE_KINDS = ("prose", "numbers", "receipt", "table", "form", "letter", "two-columns")  # documents
UNPREDICTABLE_KINDS = ("random", "code", "bordered-table", "symbols", "mixed-case")  # nothing a prior can guess
# What a reader trains on: as many unpredictable pages as document pages, so that it reads rather than recites.
TRAINING_KINDS = tuple(kind for pair in zip(PAGE_KINDS, (*UNPREDICTABLE_KINDS, "random", "code")) for kind in pair)
# Where a reader trained on those still fails: look-alike glyphs and rows that repeat (`LOOK_ALIKE_CLASSES`).
HARD_KINDS = ("look-alikes", "digit-grid", "repeats", "formulas")
# What a reader refines on after `TRAINING_KINDS`: every other page a hard one.
REFINING_KINDS = tuple(kind for index, trained in enumerate(TRAINING_KINDS)
                       for kind in (HARD_KINDS[index % len(HARD_KINDS)], trained))
# Rows laid out with runs of spaces (indentation, aligned columns, centred titles): what a reader that writes rows
# without their trailing spaces must place from the page alone.
LAYOUT_KINDS = ("layout",)
# What a reader learns to write merged tokens of unpadded rows on: the refining's kinds, every other page laid out or
# of made-up words (`WORD_KINDS`: merges in words no corpus holds, as text written elsewhere has them).
WORD_KINDS = ("made-up-words",)
MERGING_KINDS = tuple(kind for index, refined in enumerate(REFINING_KINDS)
                      for kind in (refined, (*LAYOUT_KINDS, *WORD_KINDS)[index % 2]))


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
    return lines


def _sparse(lines: list[str], rng: np.random.Generator) -> list[str]:
    """The page with some of the room left empty, as a short text leaves it: fewer rows, blank rows between rows,
    or rows cut short (at least one character stays)."""
    form = int(rng.integers(0, 3))
    if form == 0:
        lines = lines[:int(rng.integers(1, PAGE_ROWS))]
    elif form == 1:
        blank = rng.random(len(lines)) < 0.4
        blank[int(rng.integers(0, len(lines)))] = False
        lines = ["" if drop else line for line, drop in zip(lines, blank)]
    else:
        lines = [line[:int(rng.integers(1, len(line) + 1))].rstrip() if line.strip() and rng.integers(0, 2) else line
                 for line in lines]
    return lines if any(line.strip() for line in lines) else ["?"]


def iter_reading_pages(*, seed: int, split: str = "train", kinds: tuple[str, ...] = PAGE_KINDS,
                       ink: Callable[[np.random.Generator], Ink] | None = None, sparse_share: float = 0.0
                       ) -> Iterator[ReadingPage]:
    """Generated pages of one split without end, kinds in turn, each of the one shape (`PAGE_ROWS` x `PAGE_WIDTH`).

    Args:
        seed: the text and look of every page are a function of the seed.
        split: "train" or "held-out": every row of a page belongs to this split (`line_split`).
        kinds: the page kinds to cycle through (`PAGE_KINDS`, `UNPREDICTABLE_KINDS`, `TRAINING_KINDS`).
        ink: rng -> how a page is inked (for example `Ink.random`, as training does); None: the sample pages' ink.
        sparse_share: the share of pages drawn with fewer rows, blank rows or short rows (padded to the one shape).

    Yields:
        `ReadingPage`s named by kind; `text` is what a reader should write (`page_text`).
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: choose one of {', '.join(SPLITS)}")
    unknown = [kind for kind in kinds if kind not in _KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown page kinds {unknown}; the kinds are {', '.join(_KINDS)}")
    if not 0 <= sparse_share <= 1:
        raise ValueError(f"sparse_share={sparse_share} must be in [0, 1]")
    rng = np.random.default_rng([seed, SPLITS.index(split)])
    for kind in itertools.cycle(kinds):
        lines = _page_lines(kind, rng, split=split)
        if sparse_share and rng.random() < sparse_share:
            lines = _sparse(lines, rng)
        lines = fit_page(lines)
        image = render_typewriter_page(lines, ink(rng) if ink else None)
        yield ReadingPage(kind, page_text(lines), image)


def reading_pages(count: int, *, seed: int, split: str = "train", kinds: tuple[str, ...] = PAGE_KINDS,
                  sparse_share: float = 0.0) -> list[ReadingPage]:
    """The first `count` pages of `iter_reading_pages` with these options (sample-page ink)."""
    return list(itertools.islice(iter_reading_pages(seed=seed, split=split, kinds=kinds, sparse_share=sparse_share),
                                 count))


SAMPLE_SEED = 1  # the seed of the sample pages' held-out stream (`measure_reading` reads seed 0's)
SAMPLE_PAGE_COUNT = 10  # how many pages `sample_pages` gives


def sample_pages() -> list[SamplePage]:
    """The ten sample pages, in a fixed order: generated typewriter pages of the held-out split (the seven kinds,
    then prose, numbers and a receipt again), which the shipped tiny pair reads and no training page shows."""
    pages, seen = [], {}
    for page in reading_pages(SAMPLE_PAGE_COUNT, seed=SAMPLE_SEED, split="held-out"):
        seen[page.kind] = seen.get(page.kind, 0) + 1
        name = page.kind if seen[page.kind] == 1 else f"{page.kind} {seen[page.kind]}"
        pages.append(SamplePage(name, page.text, page.image))
    return pages


def unpredictable_sample_pages(count: int = 4) -> list[SamplePage]:
    """`count` held-out pages no prior helps (seed `SAMPLE_SEED`), uniformly random printable ASCII and runs of
    symbols in turn, named by kind and number (`random 1`, `symbols 1`, `random 2`, ...).

    The shipped draft reads the sample pages whole (every draft accepted), so the lessons on rejection (a cut
    draft, a step that accepts some drafts but not all, acceptance along the block, a Markov walk that changes what
    the target accepts) read these after them: with nothing to lean on but the glyphs, the draft still misses now
    and then. Each page has its own name, as tables grouped by page need.
    """
    pages = reading_pages(count, seed=SAMPLE_SEED, split="held-out", kinds=("random", "symbols"))
    return [SamplePage(f"{page.kind} {index // 2 + 1}", page.text, page.image) for index, page in enumerate(pages)]
