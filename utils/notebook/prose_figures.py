"""Measured figures stated in prose that no run carries: the check that keeps a notebook's text from going stale.

A markdown cell may state a measured figure ("0 of 20 cases", "4.18 tokens per step", "2.9x", "13%") only if
the notebook carries it: one of its stored outputs prints it (for example `display(Markdown(...))` built from
the result), or the first code cell after the sentence asserts each of its numbers. Figures measured upstream
and quoted as such (`UPSTREAM_FIGURES`) are the exception. Used by `tests/test_notebook_prose.py` on every
notebook, and on the README and docs/usage.md against the stored outputs of all notebooks.

The same holds for a judgement in words ("the dense walk is clearly slower", "compression changes nothing"): a
notebook's markdown may not judge an outcome its cells measure, since no figure check can see the words go
stale. The cell that measures prints the judgement instead (`utils.evaluation.speed_notes`). A sentence that is
hedged or general ("can", "would", "if", "not always"), quoted from upstream, or that points to what a cell
prints is not a judgement of this run.

And a word of all or nothing beside a count must agree with it: "identical on 2519 of 2520 tokens", "every page
(9 of 10)" or "never (3 of 20)" is a contradiction even when the count is printed (`contradicted_counts`).
"""

from __future__ import annotations

import re

__all__ = ["UPSTREAM_FIGURES", "stated_figures", "carried_text", "unsupported_figures", "unsupported_in_text",
           "judgements", "contradicted_counts"]

_NUMBER = r"\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(
    rf"(?<![\w.,])(?:{_NUMBER}\s+(?:out\s+)?of\s+\d[\d,]*(?![\w,])"  # a count: 3 of 20
    rf"|\d+\.\d+\s*(?:x\b|tokens per step|tok/s|tokens/s|ms\b)"  # a rate or a ratio: 4.18 tokens per step, 2.9x
    rf"|{_NUMBER}\s*%)")  # a share: 13%
# Quoted from the seed pull request (optimum-intel #2099, an Arc B390 GPU): upstream's measurements, not ours.
UPSTREAM_FIGURES = frozenset({"5.47 tokens per step", "2.23x", "1.08x", "90.6 tok/s", "201.8 tok/s"})


def stated_figures(text: str) -> list[str]:
    """The measured figures a text states, whitespace collapsed, upstream quotes left out."""
    found = (" ".join(match.group(0).split()) for match in FIGURE.finditer(text))
    return [figure for figure in found if figure not in UPSTREAM_FIGURES]


def _numbers(figure: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?", figure.replace(",", ""))


def _carried_by(figure: str, text: str) -> bool:
    """Whether `text` prints the figure: its numbers in the same order, apart only by words and spaces."""
    numbers = _numbers(figure)
    pattern = r"[^\d\n]{0,12}?".join(rf"(?<![\d.]){re.escape(number)}(?![\d]|\.\d)" for number in numbers)
    return re.search(pattern, text.replace(",", "")) is not None


def _output_text(output: dict) -> str:
    if "text" in output:
        return "".join(output["text"])
    data = output.get("data", {})
    return "\n".join("".join(data[kind]) for kind in ("text/plain", "text/markdown", "text/html") if kind in data)


def carried_text(notebook: dict) -> str:
    """Everything the stored outputs of a notebook print, one output after another."""
    return "\n".join(_output_text(output) for cell in notebook["cells"] if cell["cell_type"] == "code"
                     for output in cell.get("outputs", []))


def _asserted_next(cells: list[dict], index: int) -> str:
    """The assert lines of the first code cell after cell `index`."""
    for cell in cells[index + 1:]:
        if cell["cell_type"] == "code":
            return "\n".join(line for line in "".join(cell["source"]).splitlines() if "assert" in line)
    return ""


def unsupported_in_text(text: str, carried: str) -> list[str]:
    """The figures `text` states that `carried` does not print."""
    return [figure for figure in stated_figures(text) if not _carried_by(figure, carried)]


def unsupported_figures(notebook: dict) -> list[tuple[int, str]]:
    """(cell index, figure) for each figure a markdown cell states that no output and no assert right after carries."""
    cells, outputs = notebook["cells"], carried_text(notebook)
    found = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        asserted = _asserted_next(cells, index)
        for figure in unsupported_in_text("".join(cell["source"]), outputs):
            if not all(re.search(rf"(?<![\d.]){re.escape(n)}(?![\d])", asserted) for n in _numbers(figure)):
                found.append((index, figure))
    return found


_JUDGEMENT = re.compile(
    r"\b(?:faster|slower|quicker|cheaper|costlier|costs? (?:more|less)|beats?|outperforms?|wins?|loses|pays? off|pays"
    r"|better|worse|changes? nothing|makes? no difference|clearly|visibly"
    r"|much (?:more|less|fewer|higher|lower))\b", re.IGNORECASE)
_NOT_OF_THIS_RUN = re.compile(
    r"\b(?:can|could|may|might|would|should|if|when|whether|unless|expected|usually|typically|not always|upstream"
    r"|the (?:next |following )?cell|below|prints?|printed)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?:])\s+|\n\s*[-*]\s+|\n\s*\n")


def judgements(notebook: dict) -> list[tuple[int, str]]:
    """(cell index, sentence) for each markdown sentence that judges an outcome in words as a fact of this run."""
    found = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        for sentence in _SENTENCE_END.split("".join(cell["source"])):
            if _JUDGEMENT.search(sentence) and not _NOT_OF_THIS_RUN.search(sentence):
                found.append((index, " ".join(sentence.split()).lstrip("-* ")))
    return found


_ALL = re.compile(r"\b(?:identical|every|each|all|always|same|equal|whole)\b", re.IGNORECASE)
_NONE = re.compile(r"\b(?:never|none|nothing|no (?:token|page|step|draft|case|answer|text)s?)\b", re.IGNORECASE)
_CLAUSE_END = re.compile(r"(?<=[.!?])\s+|\n\s*[-*]\s+|\n\s*\n")  # a colon joins a claim and its count
_COUNT = re.compile(rf"(?<![\w.,])({_NUMBER})\s+(?:out\s+)?of\s+(\d[\d,]*)(?![\w,])")


def contradicted_counts(text: str) -> list[str]:
    """The sentences of `text` whose word of all or nothing ("identical", "every", "never", ...) a count beside
    it contradicts: a word of all next to "a of b" with a < b, a word of nothing next to one with a > 0."""
    found = []
    for sentence in _CLAUSE_END.split(text):
        counts = [(float(a.replace(",", "")), float(b.replace(",", ""))) for a, b in _COUNT.findall(sentence)]
        if ((_ALL.search(sentence) and any(a < b for a, b in counts))
                or (_NONE.search(sentence) and any(a > 0 for a, _ in counts))):
            found.append(" ".join(sentence.split()).lstrip("-* "))
    return found
