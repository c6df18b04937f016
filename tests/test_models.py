"""The models folder: the shipped pair's IR is exported once, and again when the pair or the exporter changes."""

from __future__ import annotations

from pathlib import Path

from utils.models import default_ir_pair


def test_the_default_pair_is_exported_once_and_again_when_the_ir_format_changes(tmp_path, monkeypatch):
    exported = []

    def fake_export(kind):
        def export(source, out, **options):
            exported.append(kind)
            Path(out).mkdir(parents=True, exist_ok=True)
            return Path(out)
        return export

    monkeypatch.setattr("utils.export.draft.export_draft", fake_export("draft"))
    monkeypatch.setattr("utils.export.target.export_target", fake_export("target"))
    target, draft = default_ir_pair(tmp_path)
    assert (target, draft) == (tmp_path / "tiny-ov" / "target", tmp_path / "tiny-ov" / "draft")
    assert exported == ["draft", "target"]
    default_ir_pair(tmp_path)
    assert exported == ["draft", "target"]  # up to date: nothing exported
    monkeypatch.setattr("utils.models.IR_FORMAT_VERSION", 10_000)  # an exporter writing another IR layout
    default_ir_pair(tmp_path)
    assert exported == ["draft", "target"] * 2
