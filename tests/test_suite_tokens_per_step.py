"""The suite's tokens-per-step figures side by side: each setting names a section that exists, the prefill is
counted or left out as stated, and each page is read once per budget and threshold."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from utils.engine.verification import StepRecord
from utils.evaluation.suite_tokens_per_step import (SUITE_SETTINGS, FigureSetting, by_page, read_settings,
                                                  prefill_gain, setting_notes, table_rows,
                                                  tokens_per_step)
from utils.notebook.cross_references import heading_anchor, section_outputs

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.mark.parametrize("setting", SUITE_SETTINGS, ids=lambda setting: f"{setting.notebook[:2]} {setting.section}")
def test_each_setting_names_a_section_of_its_notebook_that_prints(setting):
    sections = section_outputs(json.loads((NOTEBOOKS / setting.notebook).read_text(encoding="utf-8")))
    assert sections.get(heading_anchor(setting.section), 0) > 0, setting.where


def test_the_prefill_is_one_token_of_one_step_per_reading():
    runs = [[StepRecord(drafted=(), emitted=(1,)), StepRecord(drafted=(2, 3), emitted=(2, 3, 4))],
            [StepRecord(drafted=(), emitted=(1,)), StepRecord(drafted=(2,), emitted=(5,)),
             StepRecord(drafted=(2,), emitted=(2, 6))]]
    assert tokens_per_step(runs) == (8 / 5, 6 / 3)
    with pytest.raises(ValueError, match="no decode step"):
        tokens_per_step([[StepRecord(drafted=(), emitted=(1,))]])


class _Pipeline:
    """Reads page i as i + 1 tokens ending with EOS (0), then pads to the budget; counts its readings."""

    eos_token_ids = (0,)

    def __init__(self):
        self.reads = []

    def generate(self, image, prompt, *, max_new_tokens, confidence_threshold):
        self.reads.append((image, max_new_tokens, confidence_threshold))
        tokens = ([7] * image + [0])[:max_new_tokens]
        steps = [StepRecord(drafted=(), emitted=(token,)) for token in tokens]
        return SimpleNamespace(texts=["x" * image], tokens=tokens, metrics=SimpleNamespace(steps=steps))


def test_pages_are_read_once_per_budget_and_threshold_and_a_reading_that_ended_serves_smaller_budgets():
    pages = [SimpleNamespace(name=f"p{i}", image=i, text="x" * (i if i != 1 else 9)) for i in range(1, 4)]
    settings = [FigureSetting("a.ipynb", "A", 3, 2, 0.0, "f32"), FigureSetting("b.ipynb", "B", 3, 8, 0.0, "f32"),
                FigureSetting("c.ipynb", "C", 3, 8, 0.5, "f32", first_read_exactly=True)]
    pipeline = _Pipeline()
    rows = read_settings(pipeline, pages, settings)
    assert [row["setting"].section for row in rows] == ["A", "B", "C"]
    # budget 8 first: every page ends (EOS) within 8 tokens; budget 2 reuses page 1's reading (2 tokens), reads the rest
    assert sorted(pipeline.reads) == sorted([(1, 8, 0.0), (2, 8, 0.0), (3, 8, 0.0), (2, 2, 0.0), (3, 2, 0.0),
                                             (1, 8, 0.5), (2, 8, 0.5)])
    assert rows[2]["pages"] == ["p2"]  # p1's text is not what it reads; p2 is read without an error
    assert rows[1]["tokens"] == 2 + 3 + 4 and rows[1]["steps"] == 9 and rows[1]["with prefill"] == 1.0


def _row(notebook: str, pages: list[str], budget: int, threshold: float, value: float) -> dict:
    return {"setting": FigureSetting(notebook, "S", len(pages), budget, threshold, f"{notebook} precision"),
            "pages": pages, "with prefill": value}


def test_notes_pair_the_settings_one_setting_apart_and_name_it():
    rows = [_row("01.ipynb", ["a"], 512, 0.5, 8.1), _row("02.ipynb", ["a"], 32, 0.5, 6.4),
            _row("04.ipynb", ["a", "b"], 32, 0.5, 4.92), _row("05.ipynb", ["a"], 512, 0.5, 8.1),
            _row("06.ipynb", ["a", "b", "c"], 48, 0.0, 5.82)]
    notes = setting_notes(rows)
    assert "only the token budget differs between 01 (S) and 02 (S) (512 vs 32): 8.10 vs 6.40 tokens per step" in notes
    assert "only the page set differs between 02 (S) and 04 (S) (a vs a, b): 6.40 vs 4.92 tokens per step" in notes
    assert any(note.startswith("01 (S) and 05 (S) read the same pages") and "01.ipynb precision" in note
               for note in notes)
    assert not any("06 (S)" in note for note in notes)  # two settings or more apart from every other row
    assert not any("05 (S) (" in note for note in notes)  # 05 reads as 01 does: paired once, as the same


def test_the_table_names_few_pages_and_counts_many_and_each_page_has_its_figure():
    runs = [[StepRecord(drafted=(), emitted=(1,)), StepRecord(drafted=(2, 3), emitted=(2, 3, 4))],
            [StepRecord(drafted=(), emitted=(1,)), StepRecord(drafted=(2,), emitted=(5,))]]
    row = {**_row("06-x.ipynb", ["a", "b"], 48, 0.0, 2.0), "runs": runs, "tokens": 6, "steps": 4,
           "without prefill": 3.0}
    table = table_rows([row])[0]
    assert table["pages"] == "the first 2 sample pages (a, b)" and table["tokens / steps"] == "6 / 4"
    assert table["printed in"] == "[06: S](06-x.ipynb#S)" and table["tokens per step"] == "2.00"
    assert by_page(row) == {"a": 2.0, "b": 1.0}


def test_a_setting_names_its_pages_sample_or_random_and_reads_those():
    def setting(pages, first=0):
        return FigureSetting("x.ipynb", "S", pages, 8, 0.0, "f32", first=first)

    assert setting(1).page_set == "the first sample page" and setting(4).page_set == "the first 4 sample pages"
    assert setting(14).page_set == "the 10 sample pages and 4 unpredictable"
    assert setting(4, first=10).page_set == "the 4 unpredictable pages"
    pages = [SimpleNamespace(name=f"p{i}", image=i, text="x" * i) for i in range(1, 15)]
    rows = read_settings(_Pipeline(), pages, [setting(2, first=10), setting(14)])
    assert rows[0]["pages"] == ["p11", "p12"] and len(rows[1]["pages"]) == 14


def test_the_prefill_gain_is_gathered_per_budget():
    rows = [{**_row("02.ipynb", ["a"], 32, 0.5, 6.4), "without prefill": 7.75},
            {**_row("04.ipynb", ["a", "b"], 32, 0.5, 4.92), "without prefill": 5.64},
            {**_row("07.ipynb", ["a"], 512, 0.0, 5.23), "without prefill": 5.37}]
    gains = prefill_gain(rows)
    assert list(gains) == [32, 512]
    assert gains[32] == pytest.approx((0.72, 1.35)) and gains[512] == pytest.approx((0.14, 0.14))
