"""NNCF weight compression of the exported tiny pair: element types, the INT8 lm_head rule, what still runs.

Measured on the tiny pair (f32 inference, so differences come from the weights): INT8 moves the target's
prefill logits by at most ~0.3 (logit std ~0.76), INT4 by ~1.4. The random tiny target has logit margins
of a few hundredths, so even INT8 changes its greedy text after a few tokens: the target test bounds the
logit error and asks for the same first token, not for equal pages. TARGET_LOGITS_ATOL = 0.5.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import openvino as ov
import pytest

from utils.contract import DRAFT_MODEL, LANGUAGE_MODEL_CONFIG, MARKOV_HEAD_MODEL, read_d2t, read_draft_info
from utils.engine.device import F32_PROPERTIES
from utils.engine.draft import DraftModel, MarkovHead
from utils.evaluation.compression_report import REFERENCE_FORMAT, compression_report
from utils.evaluation.pages import sample_pages
from utils.export.__main__ import main as export_cli
from utils.export.compression import (CompressionConfig, compress_folder, compress_model, compressed_files, head_weight,
                                      weight_constants)
from utils.export.draft import export_draft
from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

TARGET_LOGITS_ATOL = 0.5
PAGES = sample_pages()[:3]
DECODE_IR = "openvino_language_model_decode.xml"


@pytest.fixture(scope="module")
def compressed(tiny_ir, tmp_path_factory):
    """(kind, format) -> folder: the tiny draft in INT8 and INT4, the tiny target in INT8; fp32 as exported."""
    target, draft = tiny_ir
    root = tmp_path_factory.mktemp("compressed")
    folders = {("target", "fp32"): target, ("draft", "fp32"): draft}
    for kind, fmt in (("draft", "int8"), ("draft", "int4"), ("target", "int8")):
        source = folders[(kind, "fp32")]
        folders[(kind, fmt)] = compress_folder(source, root / f"{kind}-{fmt}", weight_format=fmt)
    return folders


def _read(folder, name=DRAFT_MODEL) -> ov.Model:
    return ov.Core().read_model(folder / name)


def _types(model: ov.Model) -> Counter:
    return Counter((info.consumer, info.element_type) for info in weight_constants(model))


def _check_int4_layout(backbone: ov.Model) -> None:
    """The INT4 rule: the lm_head INT8 (u8), every other MatMul weight INT4 (u4)."""
    head = head_weight(backbone)
    assert head.element_type == "u8", f"lm_head {head.name} is {head.element_type}, expected INT8 (u8)"
    others = [info for info in weight_constants(backbone) if info.consumer == "MatMul" and info.name != head.name]
    assert others and all(info.element_type == "u4" for info in others), Counter(i.element_type for i in others)


def test_int4_draft_keeps_lm_head_int8_and_every_other_matmul_int4(compressed):
    _check_int4_layout(_read(compressed[("draft", "int4")]))


def test_the_int4_rule_fails_on_a_draft_whose_lm_head_is_int4(compressed):
    import nncf

    all_int4 = nncf.compress_weights(_read(compressed[("draft", "fp32")]), mode=nncf.CompressWeightsMode.INT4_ASYM,
                                     group_size=64, ratio=1.0, all_layers=True)
    assert head_weight(all_int4).element_type == "u4"
    with pytest.raises(AssertionError, match="lm_head"):
        _check_int4_layout(all_int4)


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_markov_tables_are_int8_per_row_in_both_formats(compressed, fmt):
    head = _read(compressed[("draft", fmt)], MARKOV_HEAD_MODEL)
    assert set(_types(head)) == {("Gather", "u8"), ("MatMul", "u8")}, _types(head)  # no float table, none INT4
    info = read_draft_info(head)
    tables = [w for w in weight_constants(head) if w.consumer == "Gather"]
    assert {w.shape for w in tables} == {(info.vocab_size, info.markov_rank), (info.draft_vocab_size, info.markov_rank)}


def test_int8_leaves_no_float_weight_in_any_ir(compressed):
    for kind in ("draft", "target"):
        folder = compressed[(kind, "int8")]
        for name in compressed_files(folder):
            types = {element_type for _, element_type in _types(_read(folder, name))}
            assert types == {"u8"}, (name, types)
        assert _read(folder, compressed_files(folder)[0]).get_rt_info(["dspark", "weight_format"]).astype(str) == "int8"


def test_the_uncompressed_export_has_float_weights_only(compressed):
    folder = compressed[("draft", "fp32")]
    assert {element_type for _, element_type in _types(_read(folder))} == {"f32"}
    assert head_weight(_read(folder)).shape == (read_draft_info(_read(folder)).draft_vocab_size, 64)


def test_int4_target_language_model_keeps_lm_head_int8(compressed):
    model = compress_model(_read(compressed[("target", "fp32")], DECODE_IR), weight_format="int4",
                           config=CompressionConfig(group_size=128))
    _check_int4_layout(model)
    assert _types(model)[("GroupConvolution", "u8")] > 0  # the conv of each linear-attention layer: INT8


def test_compressed_draft_passes_the_runtime_checks_and_stays_close(compressed, tiny_ir):
    reference_folder = compressed[("draft", "fp32")]
    info = read_draft_info(_read(reference_folder))
    rng = np.random.default_rng(0)
    block = rng.normal(size=(1, info.block_size, 64)).astype(np.float32)
    context = rng.normal(size=(1, 12, 64 * len(info.target_layer_ids))).astype(np.float32)
    reference = DraftModel(reference_folder, properties=F32_PROPERTIES).forward_block(block, context)
    agreement = {}
    for fmt in ("int8", "int4"):
        folder = compressed[("draft", fmt)]
        for name in (DRAFT_MODEL, MARKOV_HEAD_MODEL):
            assert read_draft_info(_read(folder, name)) == info
        assert np.array_equal(read_d2t(_read(folder)), read_d2t(_read(reference_folder)))
        assert json.loads((folder / "local-to-target.json").read_text()) == json.loads(
            (reference_folder / "local-to-target.json").read_text())
        logits, hidden = DraftModel(folder, properties=F32_PROPERTIES).forward_block(block, context)
        tokens, confidences = MarkovHead(folder, properties=F32_PROPERTIES).walk(
            logits, hidden, anchor=7, num_tokens=info.block_size)
        assert tokens.shape == (info.block_size,) and ((0 < confidences) & (confidences < 1)).all()
        agreement[fmt] = (logits.argmax(-1) == reference[0].argmax(-1)).mean()
    assert agreement["int8"] >= agreement["int4"] and agreement["int8"] >= 0.75, agreement


def test_int8_target_runs_in_the_pipeline_close_to_fp32(compressed):
    pipelines = {fmt: SpeculativeOcrPipeline(compressed[("target", fmt)], device="CPU", precision="f32")
                 for fmt in ("fp32", "int8")}
    description = json.loads((compressed[("target", "int8")] / LANGUAGE_MODEL_CONFIG).read_text())
    assert description["weight_format"] == "int8"
    for page in PAGES:
        logits = {}
        for fmt, pipeline in pipelines.items():
            pipeline.language_model.reset()
            logits[fmt], _ = pipeline.language_model.prefill(
                pipeline.prompt_embeddings(page.image, "Text Recognition:"))
        assert np.abs(logits["int8"] - logits["fp32"]).max() < TARGET_LOGITS_ATOL, page.name
        answers = {fmt: pipeline.generate(page.image, max_new_tokens=8).tokens for fmt, pipeline in pipelines.items()}
        assert answers["int8"][0] == answers["fp32"][0], page.name


def test_export_draft_int4_writes_what_compress_folder_writes(tiny_pair, compressed, tmp_path):
    exported = export_draft(tiny_pair.draft, tmp_path / "draft-int4", weight_format="int4")
    for name in (DRAFT_MODEL, MARKOV_HEAD_MODEL):
        assert _types(_read(exported, name)) == _types(_read(compressed[("draft", "int4")], name))
        assert (exported / name).with_suffix(".bin").read_bytes() == (
            compressed[("draft", "int4")] / name).with_suffix(".bin").read_bytes()


def test_cli_exports_an_int4_draft(tiny_pair, tmp_path, capsys):
    assert export_cli(["draft", "--model", str(tiny_pair.draft), "--out", str(tmp_path / "d"),
                       "--weight-format", "int4"]) == 0
    assert "int4" in capsys.readouterr().out
    _check_int4_layout(_read(tmp_path / "d"))


@pytest.mark.parametrize("kind", ["draft", "target"])
def test_compressing_a_compressed_folder_is_refused_and_writes_nothing(compressed, kind, tmp_path):
    with pytest.raises(ValueError, match="already has int8 weights.*compress the uncompressed"):
        compress_folder(compressed[(kind, "int8")], tmp_path / "again", weight_format="int4")
    assert not (tmp_path / "again").exists()


def test_weights_compressed_elsewhere_are_refused(compressed, tmp_path):
    import nncf

    folder = tmp_path / "elsewhere"
    folder.mkdir()
    for path in compressed[("draft", "fp32")].iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    ov.save_model(nncf.compress_weights(_read(folder)), tmp_path / "model.xml")  # no dspark/weight_format
    for suffix in (".xml", ".bin"):
        (folder / DRAFT_MODEL).with_suffix(suffix).write_bytes((tmp_path / "model").with_suffix(suffix).read_bytes())
    with pytest.raises(ValueError, match="compressed elsewhere"):
        compress_folder(folder, tmp_path / "out", weight_format="int8")


def test_bad_requests_fail_clearly(compressed, tmp_path):
    with pytest.raises(ValueError, match="weight_format='int3'"):
        compress_folder(compressed[("draft", "fp32")], tmp_path / "out", weight_format="int3")
    with pytest.raises(ValueError, match="neither a draft export"):
        compress_folder(tmp_path, tmp_path / "out", weight_format="int8")
    with pytest.raises(ValueError, match="ratio"):
        CompressionConfig(ratio=0)


def test_report_measures_sizes_agreement_and_tokens_per_step(compressed):
    targets = {fmt: compressed[("target", fmt)] for fmt in ("fp32", "int8")}
    drafts = {fmt: compressed[("draft", fmt)] for fmt in ("fp32", "int8", "int4")}
    report = compression_report(targets, drafts, PAGES[:1], max_new_tokens=8)
    assert [row["ir"] for row in report.sizes] == [*compressed_files(targets["fp32"]), DRAFT_MODEL, MARKOV_HEAD_MODEL]
    for row in report.sizes:
        assert row["int8"] < row["fp32"] / 2, row  # ~1/4 for the large IRs; scales weigh more in small ones
        assert row.get("int4", 0) <= row["int8"], row
    assert set(report.draft) == {"int8", "int4"} and set(report.target) == {"int8"}
    for agreement in report.draft.values():
        assert agreement.blocks >= 1 and agreement.positions == agreement.blocks * 8
        assert 0 <= agreement.walk <= 1 and 0 <= agreement.top1 <= 1
    assert report.target["int8"].pages == 1 and 0 < report.target["int8"].prefix <= 1
    assert set(report.tokens_per_step) == set(drafts) and all(v >= 1 for v in report.tokens_per_step.values())
    with pytest.raises(ValueError, match=REFERENCE_FORMAT):
        compression_report({"int8": targets["int8"]}, drafts, PAGES[:1])
