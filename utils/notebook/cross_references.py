"""Cross-references between the notebooks: each one names a section that exists and prints something.

A sentence of a notebook's markdown (or of the README and docs) that names another notebook ("notebook 07 shows
where a reduced precision changes a token") sends the learner there, so it must link the section it means,
`[Choose a precision knowingly](07-inside-one-step.ipynb#Choose-a-precision-knowingly)`, and that section must
exist; when the sentence says the section shows something ("shows", "measures", "prints", "redoes", ...), the
section must print something (a code cell with a stored output). A plain "notebook 05" with no link, a link to a
notebook or section that does not exist, and a section said to show what it only talks about are reported. Used by
tests/test_notebook_prose.py on every notebook and on the README and docs/usage.md.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["heading_anchor", "section_outputs", "broken_references"]

_NAMED = re.compile(r"\bnotebooks? (\d{2})\b", re.IGNORECASE)
_LINK = re.compile(r"\]\(((?:\.\./notebooks/|notebooks/)?(\d{2})-[\w-]+\.ipynb)(?:#([^)\s]+))?\)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*(\[])|\n\s*[-*|]\s*|\n\s*\n")
_SHOWS = re.compile(r"\b(?:show|measure|print|count|comput|redo|run|check|plot|compar|read|time|find|assert)\w*",
                    re.IGNORECASE)
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*$", re.MULTILINE)


def heading_anchor(heading: str) -> str:
    """The anchor JupyterLab gives a Markdown heading: its text with spaces as dashes."""
    return heading.strip().replace(" ", "-")


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def section_outputs(notebook: dict) -> dict[str, int]:
    """{anchor: number of code cells with stored outputs} for each heading of the notebook; a section runs
    from its heading to the next heading of the same or a higher level."""
    sections: dict[str, int] = {}
    open_sections: list[tuple[int, str]] = []  # (level, anchor) of the headings that contain the current cell
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            for hashes, text in _HEADING.findall(_source(cell)):
                level = len(hashes)
                open_sections = [(lvl, anchor) for lvl, anchor in open_sections if lvl < level]
                open_sections.append((level, heading_anchor(text)))
                sections.setdefault(heading_anchor(text), 0)
        elif cell["cell_type"] == "code" and cell.get("outputs"):
            for _, anchor in open_sections:
                sections[anchor] += 1
    return sections


def _notebook_named(number: str, notebooks: dict[str, dict]) -> tuple[str, dict] | None:
    return next(((name, notebook) for name, notebook in notebooks.items() if name.startswith(f"{number}-")), None)


def broken_references(text: str, notebooks: dict[str, dict], *, own: str | None = None) -> list[str]:
    """One line per cross-reference of `text` that does not lead to a section that prints something.

    Args:
        text: markdown (a notebook's markdown cells, the README, a doc).
        notebooks: {file name: notebook} of every notebook of the suite.
        own: the file name of the notebook the text belongs to (it may name itself without a link).
    """
    found = []
    for sentence in _SENTENCE_END.split(text):
        links = {number: (file, anchor) for file, number, anchor in _LINK.findall(sentence)}
        for number, (file, anchor) in links.items():
            target = _notebook_named(number, notebooks)
            if target is None or Path(file).name != target[0]:
                found.append(f"links {file}, which is not a notebook of the suite")
                continue
            sections = section_outputs(target[1])
            if not anchor:
                found.append(f"links {target[0]} without naming a section: {sentence.strip()[:100]}")
            elif anchor not in sections:
                found.append(f"links section #{anchor} of {target[0]}, which has no such heading")
            elif sections[anchor] == 0 and _SHOWS.search(sentence):
                found.append(f"links section #{anchor} of {target[0]}, which prints nothing")
        for number in dict.fromkeys(_NAMED.findall(sentence)):
            target = _notebook_named(number, notebooks)
            if target is None:
                found.append(f"names notebook {number}, which does not exist: {sentence.strip()[:100]}")
            elif target[0] != own and number not in links:
                found.append(f"names notebook {number} without linking the section it means: "
                             f"{' '.join(sentence.split())[:100]}")
    return found
