"""No stale prose: every measured figure a notebook's markdown, the README or docs/usage.md states is printed by
a stored output (or asserted right after), no word of all or nothing contradicts a count beside it, no notebook's
markdown judges an outcome in words, and every cross-reference links a section that exists and prints something,
so a new model or IR cannot leave a sentence behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from utils.notebook.cross_references import broken_references, section_outputs
from utils.notebook.prose_figures import (carried_text, contradicted_counts, judgements, stated_figures,
                                          unsupported_figures, unsupported_in_text)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + [ROOT / "app" / "speculative-ocr.ipynb"]
DOCUMENTS = [ROOT / "README.md", ROOT / "docs" / "usage.md"]


def _notebook(markdown: str, *, printed: str = "", code: str = "print(n)") -> dict:
    """A synthetic notebook: one markdown cell, then one code cell with one stored stream output."""
    return {"cells": [{"cell_type": "markdown", "source": [markdown]},
                      {"cell_type": "code", "source": [code],
                       "outputs": [{"output_type": "stream", "name": "stdout", "text": [printed]}]}]}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_every_figure_in_a_notebooks_prose_is_printed_or_asserted(path):
    assert unsupported_figures(json.loads(path.read_text(encoding="utf-8"))) == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: path.name)
def test_every_figure_in_the_readme_and_usage_is_printed_by_a_notebook(path):
    carried = "\n".join(carried_text(json.loads(notebook.read_text(encoding="utf-8"))) for notebook in NOTEBOOKS)
    assert unsupported_in_text(path.read_text(encoding="utf-8"), carried) == []


def _markdown(notebook: dict) -> str:
    return "\n\n".join("".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "markdown")


def _suite() -> dict[str, dict]:
    return {path.name: json.loads(path.read_text(encoding="utf-8")) for path in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS + DOCUMENTS, ids=lambda path: path.name)
def test_no_word_of_all_or_nothing_contradicts_a_count(path):
    text = path.read_text(encoding="utf-8")
    assert contradicted_counts(_markdown(json.loads(text)) if path.suffix == ".ipynb" else text) == []


@pytest.mark.parametrize("path", NOTEBOOKS + DOCUMENTS, ids=lambda path: path.name)
def test_every_cross_reference_links_a_section_that_prints(path):
    suite, text = _suite(), path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        assert broken_references(_markdown(json.loads(text)), suite, own=path.name) == []
    else:
        assert broken_references(text, suite) == []


@pytest.mark.parametrize("sentence", [
    "The Top-K walk and the dense walk are identical on 2519 of 2520 tokens.",
    "Every page is read without an error (9 of 10 pages).",
    "The reduced precision never changes a token: 1 of 10 pages differ.",
])
def test_a_planted_qualitative_contradiction_fails(sentence):
    assert contradicted_counts(f"Some context.\n\n{sentence}") == [sentence]


@pytest.mark.parametrize("sentence", [
    "The two walks are identical on 2520 of 2520 tokens.", "The target reads 3 of 10 pages at 162 tokens.",
    "It never changes a token (0 of 10 pages)."])
def test_a_count_that_agrees_with_its_words_passes(sentence):
    assert contradicted_counts(sentence) == []


def _suite_of_two() -> dict[str, dict]:
    """A suite of two synthetic notebooks: 05 with a section that prints and one that only talks."""
    printing = {"cell_type": "code", "source": ["print(1)"],
                "outputs": [{"output_type": "stream", "name": "stdout", "text": ["1\n"]}]}
    return {"05-speculative-ocr.ipynb": {"cells": [
                {"cell_type": "markdown", "source": ["## See what each step accepted"]}, printing,
                {"cell_type": "markdown", "source": ["## Use the upstream path\nText only."]}]},
            "07-inside-one-step.ipynb": {"cells": [{"cell_type": "markdown", "source": ["## Cut and roll back"]}]}}


@pytest.mark.parametrize("sentence, problem", [
    ("Notebook 05 redoes this rebuild by hand.", "names notebook 05 without linking the section it means"),
    ("Notebook 05 redoes it ([Cut and roll back](05-speculative-ocr.ipynb#Cut-and-roll-back)).",
     "links section #Cut-and-roll-back of 05-speculative-ocr.ipynb, which has no such heading"),
    ("Notebook 05 runs it ([upstream](05-speculative-ocr.ipynb#Use-the-upstream-path)).",
     "links section #Use-the-upstream-path of 05-speculative-ocr.ipynb, which prints nothing"),
    ("Notebook 09 measures it.", "names notebook 09, which does not exist"),
    ("See [it](06-acceptance-plots.ipynb#Plots).", "links 06-acceptance-plots.ipynb, which is not a notebook of the suite"),
])
def test_a_planted_false_cross_reference_fails(sentence, problem):
    assert [line.split(":")[0] for line in broken_references(sentence, _suite_of_two())] == [problem.split(":")[0]]


def test_a_cross_reference_to_a_section_that_prints_passes():
    suite = _suite_of_two()
    assert section_outputs(suite["05-speculative-ocr.ipynb"]) == {"See-what-each-step-accepted": 1,
                                                                  "Use-the-upstream-path": 0}
    linked = "Notebook 05 shows every step ([steps](../notebooks/05-speculative-ocr.ipynb#See-what-each-step-accepted))."
    assert broken_references(linked, suite) == []
    assert broken_references("This notebook, notebook 07, rolls back.", suite, own="07-inside-one-step.ipynb") == []
    defined = "The words are those of notebook 05's [section](05-speculative-ocr.ipynb#Use-the-upstream-path)."
    assert broken_references(defined, suite) == [], "a section that defines words need not print"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_no_notebook_judges_an_outcome_in_its_prose(path):
    assert judgements(json.loads(path.read_text(encoding="utf-8"))) == []


@pytest.mark.parametrize("sentence", [
    "The dense walk is clearly slower than the Top-K scorer.",
    "Compression costs more than it saves on the tiny pair.",
    "- the INT4 draft beats INT8",
    "The confidence cut changes nothing here.",
])
def test_a_planted_judgement_fails(sentence):
    assert judgements(_notebook(f"Some context.\n\n{sentence}")) == [(0, " ".join(sentence.lstrip("- ").split()))]


@pytest.mark.parametrize("sentence", [
    "A compressed draft can be slower on a model this small.",  # hedged
    "Upstream measured the Top-K scorer much faster than the dense walk.",  # quoted
    "Whether compression pays, the cell below prints.",  # points to the output
    "Smaller is not always faster.",  # general
])
def test_hedged_quoted_or_deferred_sentences_are_not_judgements(sentence):
    assert judgements(_notebook(sentence)) == []


def test_a_planted_stale_sentence_fails():
    stale = _notebook("The texts differ on 3 of 20 cases.", printed="speculative != target only on 0 of 20 cases")
    assert unsupported_figures(stale) == [(0, "3 of 20")]
    fresh = _notebook("The texts differ on 0 of 20 cases.", printed="speculative != target only on 0 of 20 cases")
    assert unsupported_figures(fresh) == []


def test_a_figure_asserted_in_the_next_cell_is_carried():
    asserted = _notebook("It reaches 4.18 tokens per step.", code="assert round(rate, 2) == 4.18")
    assert unsupported_figures(asserted) == []
    assert unsupported_figures(_notebook("It reaches 4.18 tokens per step.", code="assert rate > 4")) == [
        (0, "4.18 tokens per step")]


@pytest.mark.parametrize("text, figures", [
    ("on 1,024 of 2,048 tokens", ["1,024 of 2,048"]),
    ("a 2.9x speedup at 13% of the cost, 3.5 tokens per step", ["2.9x", "13%", "3.5 tokens per step"]),
    ("upstream: 5.47 tokens per step and 2.23x", []),  # quoted from the seed PR
    ("notebook 05, 16x16 pixels, utils/tiny, one of the pages", []),  # no measured figure
])
def test_stated_figures_are_the_counts_rates_ratios_and_shares(text, figures):
    assert stated_figures(text) == figures


def test_numbers_apart_in_an_output_do_not_carry_a_figure():
    assert unsupported_in_text("3 of 20 cases", "3 pages; then 20 more lines of other text 0 of 20") == ["3 of 20"]
    assert unsupported_in_text("3 of 20 cases", "3 / 20") == []
