"""Shared fixtures: the tiny pair is built once per test session, offline."""

from __future__ import annotations

import pytest

from utils.tiny import TinyPairConfig, build_tiny_pair


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory):
    """The default tiny pair (seed 0), built into a session temporary folder."""
    return build_tiny_pair(tmp_path_factory.mktemp("tiny") / "pair", TinyPairConfig())
