"""Shared fixtures: the tiny pair is built once per test session, offline."""

from __future__ import annotations

import subprocess
import sys

import pytest

from utils.tiny import TinyPairConfig, build_tiny_pair


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory):
    """The default tiny pair (seed 0), built into a session temporary folder."""
    return build_tiny_pair(tmp_path_factory.mktemp("tiny") / "pair", TinyPairConfig())


@pytest.fixture
def run_without_torch():
    """Runs Python code in a fresh interpreter and fails if it imported torch or transformers."""

    def run(code: str) -> None:
        check = "\nimport sys\nleaked = [m for m in ('torch', 'transformers') if m in sys.modules]\nassert not leaked, leaked\n"
        result = subprocess.run([sys.executable, "-c", code + check], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr

    return run
