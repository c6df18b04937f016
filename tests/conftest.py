"""Shared fixtures: the tiny pair is built once per test session, offline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from utils.tiny import TinyPairConfig, build_tiny_pair


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory):
    """The default tiny pair (seed 0), built into a session temporary folder."""
    return build_tiny_pair(tmp_path_factory.mktemp("tiny") / "pair", TinyPairConfig())


@pytest.fixture
def fake_exporter(monkeypatch) -> list[str]:
    """Replaces `export_draft` and `export_target` by stand-ins that only make the folder; returns the list of the
    kinds exported, in order."""
    exported = []

    def fake_export(kind):
        def export(source, out, **options):
            exported.append(kind)
            Path(out).mkdir(parents=True, exist_ok=True)
            return Path(out)
        return export

    monkeypatch.setattr("utils.export.draft.export_draft", fake_export("draft"))
    monkeypatch.setattr("utils.export.target.export_target", fake_export("target"))
    return exported


@pytest.fixture
def run_without_torch():
    """Runs Python code in a fresh interpreter and fails if it imported torch or transformers."""

    def run(code: str) -> None:
        check = "\nimport sys\nleaked = [m for m in ('torch', 'transformers') if m in sys.modules]\nassert not leaked, leaked\n"
        result = subprocess.run([sys.executable, "-c", code + check], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr

    return run


@pytest.fixture(scope="session")
def tiny_ir(tiny_pair, tmp_path_factory):
    """The tiny pair exported to OpenVINO IR (fp32): (target folder, draft folder)."""
    from utils.export.draft import export_draft
    from utils.export.target import export_target

    root = tmp_path_factory.mktemp("tiny-ir")
    draft = export_draft(tiny_pair.draft, root / "draft")
    target = export_target(tiny_pair.target, root / "target", draft=tiny_pair.draft, prefill_chunk=32)
    return target, draft


@pytest.fixture(scope="session")
def reading_pair(tmp_path_factory):
    """A random tiny pair of the reading sizes (`READING_PAIR`: one token per character, pages seen unscaled)."""
    from utils.tiny.config import READING_PAIR

    return build_tiny_pair(tmp_path_factory.mktemp("reading") / "pair", TinyPairConfig(**READING_PAIR))


@pytest.fixture(scope="session")
def paragraph() -> str:
    """A paragraph of 20 lines, none wider than a page row: typed, it is read as 4 pages (6, 6, 6 and 2 rows)."""
    return "\n".join([
        "It was late in the autumn", "when the ferry stopped", "running and the island", "went quiet. The baker",
        "still opened at six, the", "post came on Tuesdays,", "and the lighthouse keeper", "wrote letters to nobody",
        "in a green notebook that", "he kept under the stairs.", "Each evening he counted", "the boats in the harbour:",
        "nine, then eight, then", "seven as the weather", "turned. By December only", "the gulls were left, and",
        "a dog that belonged to", "no one in particular.", "Spring, he wrote, comes", "back when it likes (1923)."])
