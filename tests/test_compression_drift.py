"""The helpers notebook 04 shows compression with: what the IR stores per weight (`weight_layout`), whether a second
compression writes the same weights, where a compressed target's text first parts from the reference's, tokens per
step pooled over any pages, and the caption line of each table."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest

from utils.contract import DRAFT_MODEL, LOGITS
from utils.evaluation.compressed_weights import compresses_identically, stored_weights, weight_layout
from utils.evaluation.compression_report import (FirstDifference, SpeculativeRun, first_difference, run_settings,
                                                 speculative_runs, target_agreements)
from utils.pages.samples import SamplePage
from utils.pages.reading_pages import sample_pages
from utils.export.compression import compress_model, save_ir

MODEL_NAME = DRAFT_MODEL  # a transformer IR's name: save_ir gives it INT4 under "int4"


def _model() -> ov.Model:
    """A MatMul [256 -> 128] (two groups of 128 per row under INT4), a short GroupConvolution, and an lm_head
    MatMul [128 -> 96] behind a `logits` output: the three kinds of weight an INT4 language model holds."""
    rng = np.random.default_rng(0)
    hidden = ops.parameter([1, 256], np.float32, name="hidden")
    up = ops.matmul(hidden, ops.constant(rng.standard_normal((128, 256)).astype(np.float32)), False, True)
    head = ops.matmul(up, ops.constant(rng.standard_normal((96, 128)).astype(np.float32)), False, True)
    head.output(0).get_tensor().set_names({LOGITS})
    signal = ops.parameter([1, 128, 1, 8], np.float32, name="signal")
    conv = ops.group_convolution(signal, ops.constant(rng.standard_normal((128, 1, 1, 1, 4)).astype(np.float32)),
                                 [1, 1], [0, 0], [0, 0], [1, 1])
    return ov.Model([head.output(0), conv.output(0)], [hidden, signal])


def test_weight_layout_tells_the_int8_head_and_convolution_of_an_int4_model_from_its_int4_groups():
    layout = weight_layout(compress_model(_model(), weight_format="int4"))
    assert layout == [
        {"read by": "MatMul", "stored": "u4", "zero point": "u4", "scale": "f16", "weights per scale": 128,
         "scales per row": 2, "weights": 1},
        {"read by": "GroupConvolution", "stored": "u8", "zero point": "u8", "scale": "f16", "weights per scale": 4,
         "scales per row": 1, "weights": 1},
        {"read by": "MatMul (lm_head)", "stored": "u8", "zero point": "u8", "scale": "f16", "weights per scale": 128,
         "scales per row": 1, "weights": 1},
    ]


def test_an_uncompressed_weight_has_no_zero_point_and_no_scale():
    weights = stored_weights(_model())
    assert sorted((w.consumer, w.head, w.element_type) for w in weights) == [
        ("GroupConvolution", False, "f32"), ("MatMul", False, "f32"), ("MatMul", True, "f32")]
    assert all(w.zero_point == w.scale == "" and w.per_scale == w.per_row == 0 for w in weights)
    assert {row["scale"] for row in weight_layout(_model())} == {"-"}


def test_a_second_compression_writes_the_same_weights_and_a_changed_file_is_caught(tmp_path):
    source, compressed = tmp_path / "source", tmp_path / "compressed"
    source.mkdir(), compressed.mkdir()
    ov.save_model(_model(), source / MODEL_NAME, compress_to_fp16=False)
    save_ir(ov.Core().read_model(source / MODEL_NAME), compressed / MODEL_NAME, weight_format="int4")
    assert compresses_identically(source, compressed, MODEL_NAME, weight_format="int4")
    assert not compresses_identically(source, compressed, MODEL_NAME, weight_format="int8")
    weights = (compressed / MODEL_NAME).with_suffix(".bin")
    data = bytearray(weights.read_bytes())
    data[0] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert not compresses_identically(source, compressed, MODEL_NAME, weight_format="int4")


def _letters(tokens: list[int]) -> str:
    return "".join(chr(ord("a") + token) for token in tokens)


def test_first_difference_names_the_token_where_two_answers_part():
    assert first_difference([0, 1, 2], [0, 1, 2], _letters, page="p") is None
    assert first_difference([0, 1, 2, 3], [0, 1, 4], _letters, page="p") == FirstDifference(
        page="p", position=2, reference="c", other="e", before="ab")
    assert first_difference([0, 1], [0, 1, 5], _letters, page="q") == FirstDifference(
        page="q", position=2, reference="", other="f", before="ab")


def test_tokens_per_step_pools_the_pages_asked_for():
    run = SpeculativeRun(tokens=((), ()), emitted=((1, 5, 3), (1, 2)))
    assert run.tokens_per_step() == pytest.approx(12 / 5)
    assert run.tokens_per_step(slice(1)) == pytest.approx(3.0)
    assert run.tokens_per_step(slice(1, 2)) == pytest.approx(1.5)
    assert SpeculativeRun(tokens=(), emitted=()).tokens_per_step() == 0.0


def test_run_settings_names_pages_budget_threshold_and_precision():
    pages = [SamplePage("prose", "", None), SamplePage("numbers", "", None)]
    assert run_settings(pages, max_new_tokens=32) == ("2 pages (prose, numbers), at most 32 new tokens each, "
                                                      "confidence threshold 0.5, f32 inference")
    assert run_settings(pages[:1], max_new_tokens=8, precision="default", confidence_threshold=None) == (
        "1 page (prose), at most 8 new tokens each, no confidence threshold, the device's own inference precision")


def test_a_target_agrees_with_itself_and_speculative_decoding_writes_its_text(tiny_ir):
    target, draft = tiny_ir
    pages = sample_pages()[:1]
    texts = target_agreements({"fp32": target, "same": target}, {"one": pages, "again": pages}, max_new_tokens=8)
    assert list(texts) == ["one", "again"]
    assert all(a.equal_pages == 1 and a.differences == () and a.prefix == 1 for by in texts.values()
               for a in by.values())
    runs = speculative_runs(target, {"alone": None, "fp32": draft}, pages, max_new_tokens=8)
    assert runs["fp32"].tokens == runs["alone"].tokens and len(runs["alone"].tokens[0]) >= 1
    assert runs["alone"].tokens_per_step() == 1 and runs["fp32"].tokens_per_step() >= 1
