"""Committed notebooks store no noise (no warning or stderr text, no progress bar frozen at 0%, no empty widget, no
absolute path of the machine that ran them), and outputs made by the shipped pair: each notebook's stamp is the
digest of the shipped pair's manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from utils.notebook.stored_outputs import (WIDGET_STATE, WIDGET_VIEW, absolute_paths, clean_outputs, output_noise,
                                          outputs_stamp, shipped_pair_digest, stamp_outputs)

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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_committed_outputs_were_stored_with_the_shipped_pair(path):
    stamp = outputs_stamp(json.loads(path.read_text(encoding="utf-8")))
    assert stamp == shipped_pair_digest(), (
        f"{path.name} stores outputs of another tiny pair (stamp {stamp}): execute it again and store its outputs "
        "with `python -m utils.notebook.stored_outputs`")


def test_a_stale_or_missing_stamp_is_not_the_shipped_pairs():
    notebook = {"cells": [_cell()], "metadata": {}}
    assert outputs_stamp(notebook) is None
    assert outputs_stamp(stamp_outputs(notebook, "0" * 64)) == "0" * 64 != shipped_pair_digest()
    assert outputs_stamp(stamp_outputs(notebook, shipped_pair_digest())) == shipped_pair_digest()


@pytest.mark.parametrize("printed", [
    "target: /work/main/utils/tiny/default/target\n", "saved to /home/ada/dspark/models/tiny-ov\n",
    "written in /tmp/tmpab12/results.jsonl\n", "C:\\Users\\ada\\models\\tiny-ov\n"])
def test_an_absolute_path_in_an_output_is_found(printed):
    notebook = {"cells": [_cell({"output_type": "stream", "name": "stdout", "text": [printed]})]}
    assert [line.split(": ")[1] for line in absolute_paths(notebook)] == ["absolute path"]
    assert output_noise(notebook) == absolute_paths(notebook)


@pytest.mark.parametrize("printed", [
    "target: utils/tiny/default/target\n", "see https://docs.openvino.ai/2025/index.html\n",
    "| Hills | 20/5/2013 |\n", "models/tiny-ov/draft and ~/models\n"])
def test_relative_paths_links_and_dates_are_not_absolute_paths(printed):
    notebook = {"cells": [_cell({"output_type": "stream", "name": "stdout", "text": [printed]})]}
    assert absolute_paths(notebook) == []


def test_warnings_frozen_bars_and_empty_widgets_are_found():
    noisy = {"cells": [_cell({"output_type": "stream", "name": "stderr", "text": ["x.py:3: FutureWarning: old\n"]},
                             {"output_type": "stream", "name": "stdout", "text": ["WARNING: Running pip as root\n"]},
                             _widget("pages:   0%|          | 0/12 [00:00<?, ?it/s]"), _widget("Output()"),
                             {"output_type": "display_data", "metadata": {},
                              "data": {"text/html": ["<pre style=''></pre>\n"], "text/plain": [""]}})]}
    assert [line.split(": ")[1] for line in output_noise(noisy)] == [
        "stderr", "stdout", "stale widget output", "stale widget output", "stale widget output"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_committed_notebooks_are_clean(path):
    """Cleaning a committed notebook again changes nothing: no stale widget output, no saved state of a widget
    no output shows."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    assert clean_outputs(json.loads(json.dumps(notebook))) == notebook


def test_cleaning_keeps_the_state_of_shown_widgets_and_what_they_refer_to():
    def view(model_id: str) -> dict:
        return {"output_type": "display_data", "metadata": {},
                "data": {WIDGET_VIEW: {"model_id": model_id, "version_major": 2, "version_minor": 0},
                         "text/plain": "Dropdown()"}}
    state = {"a1": {"model_name": "DropdownModel", "state": {"layout": "IPY_MODEL_b2", "style": "IPY_MODEL_c3"}},
             "b2": {"model_name": "LayoutModel", "state": {}}, "c3": {"model_name": "StyleModel", "state": {}},
             "d4": {"model_name": "FloatProgressModel", "state": {"layout": "IPY_MODEL_e5"}},
             "e5": {"model_name": "LayoutModel", "state": {}}}
    notebook = {"cells": [_cell(view("a1"))],
                "metadata": {"widgets": {WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}}}
    kept = clean_outputs(notebook)["metadata"]["widgets"][WIDGET_STATE]["state"]
    assert sorted(kept) == ["a1", "b2", "c3"]


def test_cleaning_drops_stale_widgets_and_keeps_the_rest():
    dropdown = _widget("Dropdown(description='Device:', options=('CPU',), value='CPU')")
    printed = {"output_type": "stream", "name": "stdout", "text": ["7 configurations\n"]}
    notebook = {"cells": [_cell(_widget("export target:   0%|          | 0/4"), dropdown, _widget("Output()"), printed)]}
    assert clean_outputs(notebook)["cells"][0]["outputs"] == [dropdown, printed]
    assert output_noise(notebook) == []


def test_storing_outputs_cleans_and_stamps_a_notebook(tmp_path, capsys):
    import nbformat

    from utils.notebook.stored_outputs import main

    path = tmp_path / "nb.ipynb"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("run()", outputs=[
        nbformat.from_dict(_widget("pages:   0%|          | 0/12")),
        nbformat.v4.new_output("stream", name="stdout", text="7 pages\n")])])
    nbformat.write(notebook, path)
    assert main([str(path)]) == 0
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert outputs_stamp(stored) == shipped_pair_digest()
    assert ["".join(output.get("text", "")) for output in stored["cells"][0]["outputs"]] == ["7 pages\n"]
