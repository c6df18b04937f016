"""The shipped pair's IR (`utils/tiny/default/ov`): a fresh export of the shipped checkpoint equals it, a fresh clone
reads a page from it without torch and without exporting, and an IR stamped for other files or another exporter is
never read (the pair is exported into the models folder instead)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from utils.models import EXPORT_STAMP, FRESH_EXPORT_VARIABLE, REPO_ROOT, SHIPPED_IR_DIR, default_ir_pair
from utils.pages.reading_pages import sample_pages

LOGIT_TOLERANCE = 1e-5  # f32 prompt logits of the shipped and the fresh IR (the same weights and graph: equal here)

# Imports a fresh clone's first page must not need: a meta-path finder that refuses them as if not installed.
_BLOCKER = """
import runpy, sys

class _Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torchvision", "transformers") or name.startswith("utils.export"):
            raise ModuleNotFoundError(f"{name} is not installed (blocked by the test)")

sys.meta_path.insert(0, _Refuse())
sys.argv = ["utils.ocr", *sys.argv[1:]]
runpy.run_module("utils.ocr", run_name="__main__", alter_sys=True)
"""


def _tree_digest(folder: Path) -> dict[str, str]:
    return {path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def _graph(path: Path) -> tuple[list[str], list[tuple]]:
    """(op types in topological order, sorted (type, shape, SHA-256) of every constant) of an IR: its weights compared
    exactly, whatever the names or the runtime version the XML records."""
    from utils.contract.core import openvino_core

    ops = openvino_core().read_model(path).get_ordered_ops()
    constants = sorted((str(op.get_element_type()), tuple(op.get_output_shape(0)),
                        hashlib.sha256(op.get_data().tobytes()).hexdigest())
                       for op in ops if op.get_type_name() == "Constant")
    return [op.get_type_name() for op in ops], constants


def _prompt_logits(target: Path, image) -> np.ndarray:
    """The f32 logits of the target's prefill of a page's prompt."""
    from utils.contract.target import ExportedTarget
    from utils.engine.device import compile_properties
    from utils.engine.language_model import LanguageModelSession
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    embeds = SpeculativeOcrPipeline(target, device="CPU", precision="f32").prompt_embeddings(image, "Text Recognition:")
    session = LanguageModelSession(target, config=ExportedTarget.read(target).language_model,
                                   properties=compile_properties("CPU", precision="f32"))
    return session.prefill(embeds)[0]


def _token_ids(target: Path, draft: Path | None, image) -> list[int]:
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    pipeline = SpeculativeOcrPipeline(target, draft, device="CPU", precision="f32", draft_precision="f32")
    return pipeline.generate(image, "Text Recognition:", max_new_tokens=200).tokens


@pytest.mark.slow
def test_a_fresh_export_of_the_shipped_pair_equals_the_shipped_ir(tmp_path):
    from utils.models import ship_default_ir

    fresh = ship_default_ir(tmp_path / "ov")
    assert sorted(_tree_digest(fresh)) == sorted(_tree_digest(SHIPPED_IR_DIR))
    for kind in ("target", "draft"):
        shipped_files, fresh_files = _tree_digest(SHIPPED_IR_DIR / kind), _tree_digest(fresh / kind)
        assert json.loads((fresh / kind / EXPORT_STAMP).read_text()) == json.loads(
            (SHIPPED_IR_DIR / kind / EXPORT_STAMP).read_text()), \
            f"the shipped {kind} IR is stale: rewrite it with python -m utils.models --ship-ir"
        for name in shipped_files:
            if name.endswith(".xml"):
                assert _graph(fresh / kind / name) == _graph(SHIPPED_IR_DIR / kind / name), f"{kind}/{name}"
            elif not name.endswith(".bin"):  # the weights are compared through the graph, above
                assert fresh_files[name] == shipped_files[name], f"{kind}/{name}"
    image = sample_pages()[0].image
    shipped_logits, fresh_logits = (_prompt_logits(folder / "target", image) for folder in (SHIPPED_IR_DIR, fresh))
    assert np.abs(shipped_logits - fresh_logits).max() <= LOGIT_TOLERANCE
    for draft in ("draft", None):
        shipped, again = (_token_ids(folder / "target", draft and folder / draft, image) for folder in (SHIPPED_IR_DIR, fresh))
        assert shipped == again, f"greedy tokens, draft {draft}"


def test_a_fresh_clone_reads_a_page_without_torch_and_without_exporting(tmp_path):
    page = sample_pages()[0]
    image = tmp_path / "page.png"
    page.image.save(image)
    models = tmp_path / "models"
    models.mkdir()
    shipped = _tree_digest(SHIPPED_IR_DIR)
    environ = {key: value for key, value in os.environ.items() if key != FRESH_EXPORT_VARIABLE}
    result = subprocess.run([sys.executable, "-c", _BLOCKER, str(image), "--precision", "f32"], cwd=REPO_ROOT,
                            env=environ | {"DSPARK_OCR_MODELS": str(models)}, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip("\n") == page.text
    assert "export" not in result.stderr, result.stderr
    assert not (models / "tiny-ov").exists(), "nothing exported"
    assert _tree_digest(SHIPPED_IR_DIR) == shipped, "nothing written into the shipped IR"


def test_the_shipped_ir_is_read_when_its_stamp_is_of_the_shipped_files_and_this_exporter(tmp_path, monkeypatch,
                                                                                         fake_exporter):
    monkeypatch.delenv(FRESH_EXPORT_VARIABLE, raising=False)
    exported = fake_exporter
    assert default_ir_pair(tmp_path) == (SHIPPED_IR_DIR / "target", SHIPPED_IR_DIR / "draft")
    assert exported == [] and not (tmp_path / "tiny-ov").exists()


def test_a_stale_shipped_ir_falls_back_to_exporting_into_the_models_folder(tmp_path, monkeypatch, capsys,
                                                                          fake_exporter):
    monkeypatch.delenv(FRESH_EXPORT_VARIABLE, raising=False)
    exported = fake_exporter
    shipped = _tree_digest(SHIPPED_IR_DIR)
    monkeypatch.setattr("utils.models.IR_FORMAT_VERSION", 10_000)  # an exporter writing another target layout
    assert default_ir_pair(tmp_path) == (tmp_path / "tiny-ov" / "target", tmp_path / "tiny-ov" / "draft")
    assert exported == ["draft", "target"]
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and "shipped IR (utils/tiny/default/ov) is not an export" in said[0], said
    assert "python -m utils.models --ship-ir" in said[0]
    default_ir_pair(tmp_path)
    assert exported == ["draft", "target"] and capsys.readouterr().err == "", "exported once, said once"
    assert _tree_digest(SHIPPED_IR_DIR) == shipped, "nothing written into the shipped IR"


def test_fresh_exports_can_be_asked_for_whatever_the_shipped_ir(tmp_path, monkeypatch, capsys, fake_exporter):
    monkeypatch.setenv(FRESH_EXPORT_VARIABLE, "1")
    exported = fake_exporter
    assert default_ir_pair(tmp_path) == (tmp_path / "tiny-ov" / "target", tmp_path / "tiny-ov" / "draft")
    assert exported == ["draft", "target"] and capsys.readouterr().err == ""
    monkeypatch.setenv(FRESH_EXPORT_VARIABLE, "0")
    assert default_ir_pair(tmp_path)[0] == SHIPPED_IR_DIR / "target"


def test_folders_made_from_the_shipped_ir_go_to_the_models_folder(tmp_path):
    from utils.models import derived_ir_folder

    assert derived_ir_folder(SHIPPED_IR_DIR / "draft", "int8", tmp_path) == tmp_path / "tiny-ov" / "draft-int8"
    exported = tmp_path / "MiniCPM-OCR-1.0-ov" / "target"
    assert derived_ir_folder(exported, "int4", tmp_path) == exported.with_name("target-int4"), "beside an export"
