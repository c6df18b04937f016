"""bf16-rounded weights (notebook 07's machine-independent reduced precision): the rounding is IEEE's, only the
weights are rounded, and the folder is written once per source."""

from __future__ import annotations

import json

import numpy as np
import openvino as ov
import pytest

from utils.contract import LANGUAGE_MODEL_CONFIG, LANGUAGE_MODEL_NAME, TEXT_EMBEDDINGS_NAME, VISION_EMBEDDINGS_NAME
from utils.evaluation.rounded_weights import (ROUNDED_STAMP, bf16_weight_target, round_to_bfloat16,
                                              round_weights_to_bfloat16)


def _is_bfloat16(values: np.ndarray) -> bool:
    return bool((np.ascontiguousarray(values, np.float32).view(np.uint32) & 0xFFFF == 0).all())


def test_rounding_goes_to_the_nearest_bfloat16_with_ties_to_even():
    step = 2.0 ** -7  # bf16 spacing in [1, 2)
    values = np.array([1.0, 1 + step / 2, 1 + 1.5 * step, 1 + 0.4 * step, 1 + 0.6 * step, -(1 + 0.6 * step)],
                      np.float32)
    expected = np.array([1.0, 1.0, 1 + 2 * step, 1.0, 1 + step, -(1 + step)], np.float32)
    assert round_to_bfloat16(values).tolist() == expected.tolist()


def test_rounding_matches_torch_bfloat16_and_keeps_nan_and_infinity():
    torch = pytest.importorskip("torch")
    values = np.random.default_rng(0).normal(scale=3.0, size=10_000).astype(np.float32)
    reference = torch.from_numpy(values).to(torch.bfloat16).to(torch.float32).numpy()
    assert np.array_equal(round_to_bfloat16(values), reference)
    special = round_to_bfloat16(np.array([np.nan, np.inf, -np.inf], np.float32))
    assert np.isnan(special[0]) and special[1] == np.inf and special[2] == -np.inf


def _matmul_model(weight: np.ndarray, bias: np.ndarray) -> ov.Model:
    """x [1, in] @ weight [in, out] + bias [out]: one weight (rounded) and one 1-D constant (not a weight)."""
    opset = ov.opset13
    x = opset.parameter([1, weight.shape[0]], np.float32, name="x")
    y = opset.add(opset.matmul(x, opset.constant(weight), False, False), opset.constant(bias))
    return ov.Model([y], [x], "matmul")


def _infer(model: ov.Model, x: np.ndarray) -> np.ndarray:
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled(x)[0]


def test_only_the_weights_are_rounded_and_the_model_computes_with_them():
    rng = np.random.default_rng(1)
    weight, bias = rng.normal(size=(8, 4)).astype(np.float32), rng.normal(size=4).astype(np.float32)
    x = rng.normal(size=(1, 8)).astype(np.float32)
    model = _matmul_model(weight, bias)
    assert round_weights_to_bfloat16(model) and not _is_bfloat16(weight)
    constants = {tuple(node.get_output_shape(0)): node.get_data() for node in model.get_ordered_ops()
                 if node.get_type_name() == "Constant"}
    assert _is_bfloat16(constants[(8, 4)]) and np.array_equal(constants[(4,)], bias)
    np.testing.assert_allclose(_infer(model, x), x @ round_to_bfloat16(weight) + bias, rtol=1e-5, atol=1e-5)


def _fake_target(folder, seed: int):
    """A folder `compressed_files` reads as a target export: its three IRs (small MatMuls) and a config file."""
    folder.mkdir()
    rng = np.random.default_rng(seed)
    for name in (VISION_EMBEDDINGS_NAME, TEXT_EMBEDDINGS_NAME, LANGUAGE_MODEL_NAME):
        model = _matmul_model(rng.normal(size=(8, 4)).astype(np.float32), np.zeros(4, np.float32))
        ov.save_model(model, folder / name, compress_to_fp16=False)
    (folder / LANGUAGE_MODEL_CONFIG).write_text(json.dumps({"seed": seed}))
    return folder


def test_the_rounded_folder_is_written_once_per_source(tmp_path):
    source = _fake_target(tmp_path / "target", seed=2)
    out = bf16_weight_target(source)
    assert out == tmp_path / "target-bf16-weights"
    assert (out / LANGUAGE_MODEL_CONFIG).read_text() == (source / LANGUAGE_MODEL_CONFIG).read_text()
    weights = [node.get_data() for node in ov.Core().read_model(out / LANGUAGE_MODEL_NAME).get_ordered_ops()
               if node.get_type_name() == "Constant" and len(node.get_output_shape(0)) == 2]
    assert weights and all(_is_bfloat16(w) for w in weights)
    stamp = (out / ROUNDED_STAMP).stat().st_mtime_ns
    assert bf16_weight_target(source) == out and (out / ROUNDED_STAMP).stat().st_mtime_ns == stamp  # reused

    ov.save_model(_matmul_model(np.ones((8, 4), np.float32) * 1.001, np.zeros(4, np.float32)),
                  source / LANGUAGE_MODEL_NAME, compress_to_fp16=False)  # the source changes: written again
    bf16_weight_target(source)
    weights = [node.get_data() for node in ov.Core().read_model(out / LANGUAGE_MODEL_NAME).get_ordered_ops()
               if node.get_type_name() == "Constant" and len(node.get_output_shape(0)) == 2]
    assert [w.tolist() for w in weights] == [np.ones((8, 4)).tolist()]  # 1.001 rounds to 1 in bf16
