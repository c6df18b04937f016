"""`benchmarks.draft_step` on the shipped tiny draft: it times steady steps at each context and prints one row per
precision and context (the figures themselves are machine-dependent and not checked)."""

from __future__ import annotations

from benchmarks.draft_step import main, measure
from utils.models import default_ir_pair


def test_every_step_sees_the_context_it_was_asked_for(monkeypatch):
    from utils.engine.draft import DraftModel

    seen = []
    forward_block = DraftModel.forward_block

    def recording(self, block, new_context):
        seen.append(self.length)
        return forward_block(self, block, new_context)

    monkeypatch.setattr(DraftModel, "forward_block", recording)
    results = measure(default_ir_pair()[1], contexts=[40, 300], precisions=["f32"], steps=2, rounds=1, new_context=3)
    assert seen == [0, 40, 40, 0, 300, 300]  # cache, then steps cropped back to the context
    assert set(results) == {("f32", 40), ("f32", 300), "ran_at"}
    assert all(results["f32", context]["step"] >= results["f32", context]["backbone"] > 0 for context in (40, 300))


def test_the_command_prints_a_row_per_precision_and_context(capsys):
    main(["--draft", str(default_ir_pair()[1]), "--contexts", "16", "64", "--precisions", "f32", "default",
          "--steps", "1", "--rounds", "1"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| f32") or
            line.startswith("| default")]
    assert [row.split("|")[2].strip() for row in rows] == ["16", "64", "16", "64"]
