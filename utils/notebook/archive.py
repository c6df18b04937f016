"""What notebook 08 shows of an archive run: its records as a table, a run killed partway, pages per minute.

The reading itself is `utils.archive` (`read_inputs`); these helpers only display it, and run the command line
the way a user would, to stop it with SIGKILL in the middle.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from utils.archive.run import page_name
from utils.models import REPO_ROOT

__all__ = ["read_records", "page_name", "page_texts", "records_table", "read_counts", "run_and_kill",
           "run_command_line", "plot_pages_per_minute"]

_PREVIEW = 28  # characters of a page's text in the table


def read_records(path: Path | str) -> list[dict]:
    """The records of a results file, in the order they were written."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def page_texts(records: list[dict]) -> dict[str, str]:
    """{page name: its text, or its error}: what two runs must agree on."""
    return {page_name(record): record.get("text", record.get("error")) for record in records}


def records_table(records: list[dict]) -> list[dict]:
    """One row per record, sorted by page: its name, tokens, tokens per step and the start of its text (rows
    shown as ⏎), or its error."""
    rows = []
    for record in sorted(records, key=page_name):
        if "error" in record:
            rows.append({"page": page_name(record), "tokens": "", "tokens/step": "", "text or error": record["error"]})
        else:
            text = record["text"].replace("\n", " ⏎ ")
            rows.append({"page": page_name(record), "tokens": record["tokens"],
                         "tokens/step": f"{record['tokens_per_step']:.2f}",
                         "text or error": text[:_PREVIEW] + ("…" if len(text) > _PREVIEW else "")})
    return rows


def read_counts(records: list[dict]) -> Counter:
    """How often each page has a record: 1 everywhere means nothing was read twice."""
    return Counter(page_name(record) for record in records)


def _command(arguments: list[str]) -> list[str]:
    return [sys.executable, "-m", "utils.ocr", *map(str, arguments)]


def _environment() -> dict:
    return os.environ | {"PYTHONPATH": str(REPO_ROOT)}


def run_command_line(arguments: list[str]) -> subprocess.CompletedProcess:
    """Runs `python -m utils.ocr ARGUMENTS` as a user would, and returns what it printed and its exit status."""
    return subprocess.run(_command(arguments), capture_output=True, text=True, cwd=REPO_ROOT, env=_environment())


def run_and_kill(arguments: list[str], out: Path | str, *, after: int, timeout: float = 300.0) -> int:
    """Runs `python -m utils.ocr ARGUMENTS` (which write the results file `out`), kills it with SIGKILL, no polite
    stop, once `after` records are in, and returns how many records it left."""
    out = Path(out)
    run = subprocess.Popen(_command(arguments), cwd=REPO_ROOT, env=_environment(), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    while run.poll() is None and time.monotonic() < deadline:
        if out.exists() and out.read_text(encoding="utf-8").count("\n") >= after:
            break
        time.sleep(0.02)
    if run.poll() is None:
        os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    return out.read_text(encoding="utf-8").count("\n") if out.exists() else 0


def plot_pages_per_minute(summaries: dict) -> object:
    """Two bars per way of reading ({"1 worker": ArchiveSummary, ...}): pages per minute over the whole run, the
    workers' start included, and after the first record, with their figures on top."""
    import matplotlib.pyplot as plt
    import numpy as np

    names, places, width = list(summaries), np.arange(len(summaries)), 0.38
    figure, axes = plt.subplots(figsize=(7, 3.2))
    for offset, label, rate in ((-width / 2, "whole run", lambda summary: summary.pages_per_minute),
                                (width / 2, "after the first record",
                                 lambda summary: summary.steady_pages_per_minute or 0.0)):
        bars = axes.bar(places + offset, [rate(summaries[name]) for name in names], width, label=label)
        axes.bar_label(bars, fmt="%.0f")
    axes.set_xticks(places, names)
    axes.set_ylabel("pages per minute")
    axes.set_title("Reading the archive: workers on this machine")
    axes.legend(loc="upper left", frameon=False)
    axes.margins(y=0.25)
    figure.tight_layout()
    return figure
