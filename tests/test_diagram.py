"""The step diagram of notebook 07 is drawn by the suite's code, and the committed file is that drawing."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pytest

from utils.notebook.diagram import draw_speculative_step, main

matplotlib.use("Agg")
COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "speculative-step.svg"


def test_the_diagram_colours_the_accepted_the_first_rejected_and_the_discarded_drafts():
    figure = draw_speculative_step(drafts=5, accepted=3)
    texts = [text.get_text() for text in figure.axes[0].texts]
    assert "emitted: c1..c3 + t3 = 4 tokens" in " ".join(texts)
    assert texts.count("c5") == 3  # drafted, verified, discarded
    with pytest.raises(ValueError, match="accepted=6"):
        draw_speculative_step(drafts=5, accepted=6)


def test_the_committed_svg_is_what_the_command_draws(tmp_path):
    assert main([str(tmp_path / "step.svg")]) == 0
    drawn, committed = (tmp_path / "step.svg").read_text(), COMMITTED.read_text()
    assert committed.startswith("<?xml") and "<svg" in committed
    assert abs(len(drawn) - len(committed)) < 0.05 * len(committed)  # same drawing; glyph paths vary by version
