"""Noise in a notebook's stored outputs, the cleaning that follows `jupyter nbconvert --execute`, and the stamp
that ties the outputs to the pair they came from.

Executed headless, a progress bar (tqdm, NNCF's rich display) is stored as the widget's first text, "0%" or
"Output()", forever: it says nothing once the run is over. `clean_outputs` drops those widget outputs (the
interactive widgets, a device dropdown or the app, stay). Warnings are not cleaned away: they are fixed where
they arise, and `output_noise` reports any that reach a stored output (tests/test_stored_outputs.py), as it reports
an absolute path of the machine that ran the notebook (print paths relative to the repository or the models folder).

The outputs describe one model pair: `stamp_outputs` writes the SHA-256 of the shipped pair's `manifest.json` into
the notebook's metadata when its outputs are stored, and tests/test_stored_outputs.py fails when a notebook's stamp
is not the shipped pair's, so retraining the pair means executing every notebook again (app included).

    jupyter nbconvert --to notebook --execute --inplace NB && python -m utils.notebook.stored_outputs NB
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

__all__ = ["STAMP_KEY", "shipped_pair_digest", "outputs_stamp", "stamp_outputs", "absolute_paths", "output_noise",
           "clean_outputs", "main"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"  # notebook metadata: the saved state of every widget
_MODEL_REFERENCE = re.compile(r"IPY_MODEL_([0-9a-f]+)")
_FROZEN_BAR = re.compile(r"\b0%\|")
_WARNING = re.compile(r"Warning\b|WARNING\b|^W\d{4} ", re.MULTILINE)
# A path from a file system's root (a home, a checkout, a temporary folder) or a Windows drive: it names the
# machine that ran the notebook, not the suite. URLs ("https://...") and dates ("20/5/2013") are not paths.
_ABSOLUTE_PATH = re.compile(
    r"(?<![\w.:/~-])/(?:work|home|root|tmp|usr|opt|mnt|var|private|Users|srv|data)/[^\s'\"]*"
    r"|\b[A-Za-z]:\\(?:[^\s\\'\"]+\\)+")
STAMP_KEY = "dspark_ocr"  # notebook metadata: {"shipped_pair_manifest_sha256": ...}


def shipped_pair_digest() -> str:
    """The SHA-256 of the shipped tiny pair's `manifest.json`: it changes with any file of the pair."""
    from utils.files import sha256_file
    from utils.tiny.manifest import MANIFEST
    from utils.tiny.pair import SHIPPED_PAIR_DIR

    return sha256_file(SHIPPED_PAIR_DIR / MANIFEST)


def outputs_stamp(notebook: dict) -> str | None:
    """The manifest digest the notebook's outputs were stored with, or None for a notebook never stamped."""
    return notebook.get("metadata", {}).get(STAMP_KEY, {}).get("shipped_pair_manifest_sha256")


def stamp_outputs(notebook: dict, digest: str) -> dict:
    """The notebook with its outputs stamped as made by the pair whose manifest has SHA-256 `digest`."""
    notebook.setdefault("metadata", {})[STAMP_KEY] = {"shipped_pair_manifest_sha256": digest}
    return notebook


def _widget_text(output: dict) -> str | None:
    data = output.get("data", {})
    return "".join(data.get("text/plain", "")) if WIDGET_VIEW in data else None


def _is_stale_widget(output: dict) -> bool:
    """A progress bar frozen at its first text, an empty `Output()` widget, or an empty display (a cleared bar)."""
    text = _widget_text(output)
    if text is not None:
        return bool(_FROZEN_BAR.search(text)) or text.strip() == "Output()"
    data = output.get("data", {})
    shown = "".join("".join(data.get(kind, "")) for kind in ("text/plain", "text/html"))
    return output.get("output_type") == "display_data" and set(data) <= {"text/plain", "text/html"} and not \
        re.sub(r"<[^>]*>", "", shown).strip()


def _output_text(output: dict) -> str:
    if "text" in output:
        return "".join(output["text"])
    data = output.get("data", {})
    return "\n".join("".join(value) for kind, value in data.items() if kind.startswith("text/"))


def absolute_paths(notebook: dict) -> list[str]:
    """One line per stored output that prints an absolute path of the machine that ran it."""
    return [f"cell {index}: absolute path: {match.group(0)[:100]}" for index, cell in enumerate(notebook["cells"])
            for output in cell.get("outputs", []) for match in [_ABSOLUTE_PATH.search(_output_text(output))]
            if match]


def output_noise(notebook: dict) -> list[str]:
    """One line per noisy stored output: a warning or stderr text, a frozen progress bar, an empty widget, an
    absolute path."""
    found = []
    for index, cell in enumerate(notebook["cells"]):
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", ""))
            if output.get("name") == "stderr" or _WARNING.search(text):
                found.append(f"cell {index}: {output.get('name', 'output')}: {text.strip().splitlines()[0][:120]}")
            elif _is_stale_widget(output):
                found.append(f"cell {index}: stale widget output: {(_widget_text(output) or '(empty)').strip()[:80]}")
    return found + absolute_paths(notebook)


def clean_outputs(notebook: dict) -> dict:
    """The notebook without stale widget outputs (frozen bars, empty `Output()` widgets) and without the stored
    state of widgets no kept output shows (`_shown_widget_state`); the rest untouched."""
    for cell in notebook["cells"]:
        if "outputs" in cell:
            cell["outputs"] = [output for output in cell["outputs"] if not _is_stale_widget(output)]
    saved = notebook.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE)
    if saved:
        saved["state"] = _shown_widget_state(notebook, saved["state"])
    return notebook


def _shown_widget_state(notebook: dict, state: dict) -> dict:
    """The saved widget models a kept output shows, with the models they refer to ("IPY_MODEL_<id>": layouts,
    styles, children). A headless run saves every widget it made, the progress bars `clean_outputs` drops among
    them; their state would only weigh on the file."""
    wanted = [output["data"][WIDGET_VIEW]["model_id"] for cell in notebook["cells"]
              for output in cell.get("outputs", []) if WIDGET_VIEW in output.get("data", {})]
    kept: dict = {}
    while wanted:
        model_id = wanted.pop()
        if model_id in kept or model_id not in state:
            continue
        kept[model_id] = state[model_id]
        wanted += _MODEL_REFERENCE.findall(json.dumps(state[model_id]))
    return {model_id: model for model_id, model in state.items() if model_id in kept}


def main(paths: list[str]) -> int:
    """Cleans and stamps each notebook in place and prints the noise left (exit 1 if any)."""
    left = []
    import nbformat

    digest = shipped_pair_digest()
    for path in map(Path, paths):
        notebook = stamp_outputs(clean_outputs(nbformat.read(path, as_version=nbformat.NO_CONVERT)), digest)
        nbformat.write(notebook, path)
        left += [f"{path}: {line}" for line in output_noise(notebook)]
    print("\n".join(left) or "no noise left in the stored outputs")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
