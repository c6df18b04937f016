"""NNCF weight compression of the exported tiny pair: element types, the INT8 lm_head rule, what still runs.

The random tiny target has logit margins of a few hundredths, so any rounding of its weights changes its greedy
text after a few tokens: what INT8 keeps is tested on the shipped reader instead, whose answers it must keep.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from utils.contract import (DRAFT_MODEL, LANGUAGE_MODEL_CONFIG, LANGUAGE_MODEL_NAME, MARKOV_HEAD_MODEL, read_d2t,
                            read_draft_info)
from utils.engine.device import F32_PROPERTIES
from utils.engine.draft import DraftModel, MarkovHead
from utils.evaluation.compression_report import REFERENCE_FORMAT, compression_report, time_per_token
from utils.pages.reading_pages import sample_pages
from utils.export.__main__ import main as export_cli
from utils.export.compression import (CompressionConfig, compress_folder, compress_model, compressed_files, head_weight,
                                      ir_weight_format, weight_constants)
from utils.export.draft import export_draft
from utils.export.target import export_target
from utils.models import default_ir_pair
from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

PAGES = sample_pages()[:3]


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
    assert sorted(w.shape for w in tables) == sorted([(info.vocab_size, info.markov_rank),
                                                      (info.draft_vocab_size, info.markov_rank)])  # each once


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
    model = compress_model(_read(compressed[("target", "fp32")], LANGUAGE_MODEL_NAME), weight_format="int4",
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


@pytest.mark.slow
def test_the_shipped_reader_compressed_int8_writes_the_fp32_answers(tmp_path):
    """INT8 is the default target format because it keeps the answer (docs/performance.md): at f32 inference, so
    only the weights differ, the shipped reader's INT8 target writes its fp32 target's tokens on the sample pages."""
    fp32 = default_ir_pair()[0]
    int8 = compress_folder(fp32, tmp_path / "int8", weight_format="int8")
    assert json.loads((int8 / LANGUAGE_MODEL_CONFIG).read_text())["weight_format"] == "int8"
    pipelines = {fmt: SpeculativeOcrPipeline(folder, device="CPU", precision="f32")
                 for fmt, folder in (("fp32", fp32), ("int8", int8))}
    for page in PAGES:
        answers = {fmt: pipeline.generate(page.image, "Text Recognition:").tokens
                   for fmt, pipeline in pipelines.items()}
        assert answers["int8"] == answers["fp32"], page.name


def _without_generated_names(xml: str) -> str:
    """An IR's XML with the names OpenVINO numbers per process (`Convert_1234`, `Model12`) made equal."""
    xml = re.sub(r'<net name="Model\d+"', '<net name="Model#"', xml)
    return re.sub(r"\b([A-Za-z][A-Za-z0-9]*)_\d+\b", r"\1_#", xml)


def _without_timing(path: Path):
    content = json.loads(path.read_text())
    return {**content, "export_seconds": None} if isinstance(content, dict) else content


def _as_read(xml: Path, scratch: Path) -> str:
    """The IR's XML as OpenVINO reads it (reading renames duplicate tensor names, as the two-step path's IRs were)."""
    ov.save_model(ov.Core().read_model(xml), scratch / xml.name, compress_to_fp16=False)
    return _without_generated_names((scratch / xml.name).read_text())


def _assert_same_folder(written: Path, expected: Path, scratch: Path) -> None:
    """Same files; equal weights (.bin), graphs and rt_info (.xml), manifests (timings aside) and other files."""
    assert sorted(path.name for path in written.iterdir()) == sorted(path.name for path in expected.iterdir())
    for path in expected.iterdir():
        mine = written / path.name
        if path.suffix == ".xml":
            (scratch / "mine").mkdir(exist_ok=True)
            assert _as_read(mine, scratch / "mine") == _as_read(path, scratch), path.name
        elif path.suffix == ".json":
            assert _without_timing(mine) == _without_timing(path), path.name
        else:
            assert mine.read_bytes() == path.read_bytes(), path.name


def test_export_draft_int4_writes_what_compress_folder_writes(tiny_pair, compressed, tmp_path):
    _assert_same_folder(export_draft(tiny_pair.draft, tmp_path / "draft-int4", weight_format="int4"),
                        compressed[("draft", "int4")], tmp_path)


@pytest.fixture(scope="module")
def int4_target(tiny_pair, tmp_path_factory):
    """The tiny target exported with weight_format="int4", and what it saved: [(file name, weight types, rt_info
    weight format)] for every `openvino.save_model` call, recorded before the call wrote anything."""
    saved = []
    save_model = ov.save_model

    def recording_save_model(model, path, *args, **kwargs):
        key = ["dspark", "weight_format"]
        recorded = model.get_rt_info(key).astype(str) if model.has_rt_info(key) else None
        saved.append((Path(path).name, {info.element_type for info in weight_constants(model)}, recorded))
        return save_model(model, path, *args, **kwargs)

    out = tmp_path_factory.mktemp("target-int4") / "target"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ov, "save_model", recording_save_model)
        export_target(tiny_pair.target, out, draft=tiny_pair.draft, prefill_chunk=32, weight_format="int4")
    return out, saved


@pytest.mark.slow
def test_export_target_int4_writes_what_compress_folder_writes(int4_target, tiny_ir, tmp_path):
    written, _ = int4_target
    _assert_same_folder(written, compress_folder(tiny_ir[0], tmp_path / "two-step", weight_format="int4"), tmp_path)


def test_a_compressed_target_export_never_saves_uncompressed_weights(int4_target):
    written, saved = int4_target
    weighted = compressed_files(written)
    assert sorted(name for name, _, _ in saved if name in weighted) == sorted(weighted)  # each IR saved once
    for name, types, recorded in saved:  # the tokenizer IRs too, which have no weights
        assert types <= {"u8", "u4"}, (name, types)
        assert name not in weighted or recorded == ir_weight_format(name, "int4"), (name, recorded)
    assert dict((name, types) for name, types, _ in saved)[LANGUAGE_MODEL_NAME] == {"u8", "u4"}  # INT8 lm_head


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


@pytest.mark.slow
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


def test_time_per_token_times_each_target_alone_and_each_draft_with_the_reference(compressed):
    targets = {fmt: compressed[("target", fmt)] for fmt in ("fp32", "int8")}
    drafts = {fmt: compressed[("draft", fmt)] for fmt in ("fp32", "int4")}
    rows = time_per_token(targets, drafts, PAGES[:1], max_new_tokens=8, repeats=2)
    assert [(row["model"], row["format"]) for row in rows] == [("target", "fp32"), ("target", "int8"),
                                                                ("draft", "fp32"), ("draft", "int4")]
    assert all(0 < row["min"] <= row["ms per token"] <= row["max"] for row in rows)
    assert [row["tokens per step"] for row in rows[:2]] == [1.0, 1.0]  # a target alone emits one token a step
    assert all(row["tokens per step"] >= 1.0 for row in rows[2:])
    with pytest.raises(ValueError, match="repeats=0"):
        time_per_token(targets, drafts, PAGES[:1], repeats=0)
