"""Committed notebooks store no noise: no warning or stderr text, no progress bar frozen at 0%, no empty widget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from utils.notebook.stored_outputs import WIDGET_VIEW, clean_outputs, output_noise

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + [ROOT / "app" / "speculative-ocr.ipynb"]


def _widget(text: str) -> dict:
    return {"output_type": "display_data", "metadata": {},
            "data": {WIDGET_VIEW: {"model_id": "m", "version_major": 2, "version_minor": 0}, "text/plain": text}}


def _cell(*outputs: dict) -> dict:
    return {"cell_type": "code", "source": ["run()"], "outputs": list(outputs)}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_committed_notebooks_store_no_noise(path):
    assert output_noise(json.loads(path.read_text(encoding="utf-8"))) == []


def test_warnings_frozen_bars_and_empty_widgets_are_found():
    noisy = {"cells": [_cell({"output_type": "stream", "name": "stderr", "text": ["x.py:3: FutureWarning: old\n"]},
                             {"output_type": "stream", "name": "stdout", "text": ["WARNING: Running pip as root\n"]},
                             _widget("pages:   0%|          | 0/12 [00:00<?, ?it/s]"), _widget("Output()"),
                             {"output_type": "display_data", "metadata": {},
                              "data": {"text/html": ["<pre style=''></pre>\n"], "text/plain": [""]}})]}
    assert [line.split(": ")[1] for line in output_noise(noisy)] == [
        "stderr", "stdout", "stale widget output", "stale widget output", "stale widget output"]


def test_cleaning_drops_stale_widgets_and_keeps_the_rest():
    dropdown = _widget("Dropdown(description='Device:', options=('CPU',), value='CPU')")
    printed = {"output_type": "stream", "name": "stdout", "text": ["7 configurations\n"]}
    notebook = {"cells": [_cell(_widget("export target:   0%|          | 0/4"), dropdown, _widget("Output()"), printed)]}
    assert clean_outputs(notebook)["cells"][0]["outputs"] == [dropdown, printed]
    assert output_noise(notebook) == []
