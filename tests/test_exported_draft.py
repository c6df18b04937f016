"""An exported draft folder is read once (`ExportedDraft`), and a folder that mixes two exports is refused."""

from __future__ import annotations

import json
import shutil

import openvino as ov
import pytest

from utils.contract import DRAFT_MODEL, MARKOV_HEAD_MODEL, RT_INFO_NAMESPACE
from utils.contract import draft as contract_draft
from utils.contract.draft import ExportedDraft
from utils.pages.reading_pages import sample_pages
from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline


@pytest.fixture
def reads(monkeypatch):
    """Counts the draft folder's reads: config.json parses and IR reads, by file name."""
    counted = {"config.json": 0, DRAFT_MODEL: 0, MARKOV_HEAD_MODEL: 0}
    read_config, read_ir = contract_draft.DSparkConfig.from_folder, contract_draft._read

    def counting_config(folder, **kwargs):
        counted["config.json"] += 1
        return read_config(folder, **kwargs)

    def counting_ir(folder, name):
        counted[name] += 1
        return read_ir(folder, name)

    monkeypatch.setattr(contract_draft.DSparkConfig, "from_folder", counting_config)
    monkeypatch.setattr(contract_draft, "_read", counting_ir)
    return counted


def test_a_pipeline_reads_the_draft_folder_once(tiny_ir, reads):
    target, draft = tiny_ir
    pipeline = SpeculativeOcrPipeline(target, draft, device="CPU", precision="f32")
    assert reads == {"config.json": 1, DRAFT_MODEL: 1, MARKOV_HEAD_MODEL: 1}
    exported = ExportedDraft.read(draft)
    assert pipeline.block_size == exported.info.block_size == exported.config.block_size
    again = SpeculativeOcrPipeline(target, exported, device="CPU", precision="default")  # what the panel does
    assert reads == {"config.json": 2, DRAFT_MODEL: 2, MARKOV_HEAD_MODEL: 2}
    assert again.block_size == pipeline.block_size


def test_the_panel_reads_the_draft_folder_once_for_every_precision(tiny_ir, reads):
    from utils.notebook.widgets import _OcrPanel

    panel = _OcrPanel(*tiny_ir, sample_pages()[:1], device="CPU", default_prompt="Read", max_new_tokens=4)
    for precision in ("f32", "default"):
        panel.precision.value = precision
        panel.pipelines()
    assert reads == {"config.json": 1, DRAFT_MODEL: 1, MARKOV_HEAD_MODEL: 1}
    assert panel.assistant.max == panel.draft.info.block_size


def _copy(draft, tmp_path):
    copy = tmp_path / "draft"
    shutil.copytree(draft, copy)
    return copy


def test_a_config_that_disagrees_with_the_irs_is_refused(tiny_ir, tmp_path):
    copy = _copy(tiny_ir[1], tmp_path)
    config = json.loads((copy / "config.json").read_text())
    block_size = config["block_size"]
    config["block_size"] = block_size - 1
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=rf"config.json: block_size={block_size - 1}, but the IRs were exported "
                                         rf"with block_size={block_size}"):
        ExportedDraft.read(copy)


def test_two_irs_of_different_exports_are_refused(tiny_ir, tmp_path):
    copy = _copy(tiny_ir[1], tmp_path)
    head = ov.Core().read_model(copy / MARKOV_HEAD_MODEL)
    head.set_rt_info("3", [RT_INFO_NAMESPACE, "top_k"])
    (copy / MARKOV_HEAD_MODEL).unlink()
    (copy / MARKOV_HEAD_MODEL).with_suffix(".bin").unlink()
    ov.save_model(head, copy / MARKOV_HEAD_MODEL, compress_to_fp16=False)
    with pytest.raises(ValueError, match=f"{DRAFT_MODEL} and {MARKOV_HEAD_MODEL} were exported with different "
                                         "top_k"):
        ExportedDraft.read(copy)


def test_a_folder_without_config_says_to_export(tiny_ir, tmp_path):
    copy = _copy(tiny_ir[1], tmp_path)
    (copy / "config.json").unlink()
    with pytest.raises(ValueError, match="config.json does not exist; export the draft first"):
        ExportedDraft.read(copy)


def test_an_ir_that_cannot_be_read_is_named(tiny_ir, tmp_path):
    copy = _copy(tiny_ir[1], tmp_path)
    graph = copy / DRAFT_MODEL
    graph.write_bytes(graph.read_bytes()[:len(graph.read_bytes()) // 2])
    with pytest.raises(ValueError, match=f"{DRAFT_MODEL}: OpenVINO cannot read this IR .*export the draft again"):
        ExportedDraft.read(copy)
