"""Noise in a notebook's stored outputs, and the cleaning that follows `jupyter nbconvert --execute`.

Executed headless, a progress bar (tqdm, NNCF's rich display) is stored as the widget's first text, "0%" or
"Output()", forever: it says nothing once the run is over. `clean_outputs` drops those widget outputs (the
interactive widgets, a device dropdown or the app, stay). Warnings are not cleaned away: they are fixed where
they arise, and `output_noise` reports any that reach a stored output (tests/test_stored_outputs.py).

    jupyter nbconvert --to notebook --execute --inplace NB && python -m utils.notebook.stored_outputs NB
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

__all__ = ["output_noise", "clean_outputs", "main"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_FROZEN_BAR = re.compile(r"\b0%\|")
_WARNING = re.compile(r"Warning\b|WARNING\b|^W\d{4} ", re.MULTILINE)


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


def output_noise(notebook: dict) -> list[str]:
    """One line per noisy stored output: a warning or stderr text, a frozen progress bar, an empty widget."""
    found = []
    for index, cell in enumerate(notebook["cells"]):
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", ""))
            if output.get("name") == "stderr" or _WARNING.search(text):
                found.append(f"cell {index}: {output.get('name', 'output')}: {text.strip().splitlines()[0][:120]}")
            elif _is_stale_widget(output):
                found.append(f"cell {index}: stale widget output: {(_widget_text(output) or '(empty)').strip()[:80]}")
    return found


def clean_outputs(notebook: dict) -> dict:
    """The notebook without stale widget outputs (frozen bars, empty `Output()` widgets); the rest untouched."""
    for cell in notebook["cells"]:
        if "outputs" in cell:
            cell["outputs"] = [output for output in cell["outputs"] if not _is_stale_widget(output)]
    return notebook


def main(paths: list[str]) -> int:
    """Cleans each notebook in place and prints the noise left (exit 1 if any)."""
    left = []
    import nbformat

    for path in map(Path, paths):
        notebook = clean_outputs(nbformat.read(path, as_version=nbformat.NO_CONVERT))
        nbformat.write(notebook, path)
        left += [f"{path}: {line}" for line in output_noise(notebook)]
    print("\n".join(left) or "no noise left in the stored outputs")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
