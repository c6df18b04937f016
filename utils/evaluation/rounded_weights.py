"""A target whose weights are rounded to bfloat16 and computed at f32: a reduced precision that is the same on
every machine.

A device's own reduced precision (bf16 on a CPU with AVX512-BF16 or AMX, f16 on a GPU) rounds weights and
activations inside kernels that differ from device to device, so what it changes cannot be a stored notebook
output. Rounding only the weights, once, in numpy, and running the result with the f32 inference hint gives a
reduced precision whose effect on every logit is a fixed amount (up to f32 rounding noise): a bf16 checkpoint
(the published MiniCPM-OCR and DSpark weights are bf16) run at f32, and the weight half of what bf16 inference
rounds. Notebook 07 measures it against the target's top-2 margins.

`bf16_weight_target(target)` writes the target folder once more with every weight of its three IRs rounded
(the constants NNCF would compress: `utils.export.compression.weight_constants`), kept as f32 values, beside the
source folder; a stamp of the source's IR hashes makes a changed source write it again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import openvino as ov

from utils.export.compression import compressed_files, weight_constants
from utils.files import atomic_directory, sha256_file

__all__ = ["round_to_bfloat16", "round_weights_to_bfloat16", "bf16_weight_target", "ROUNDED_STAMP"]

ROUNDED_STAMP = "rounded-weights.json"  # in the rounded folder: the rounding and the hashes of the source's IRs


def round_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """`values` rounded to the nearest bfloat16 (ties to even, as hardware converts), returned as float32.

    bfloat16 keeps float32's sign and 8 exponent bits and the top 7 of its 23 mantissa bits, so rounding is
    integer arithmetic on the upper 16 bits: the same result on any machine. NaN and infinity pass unchanged.
    """
    values = np.ascontiguousarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    rounded = ((bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) & np.uint32(0xFFFF0000)).view(np.float32)
    return np.where(np.isfinite(values), rounded, values)


def round_weights_to_bfloat16(model: ov.Model) -> dict[str, int]:
    """Replaces each f32 weight constant of `model` (MatMul, Gather, convolution) by its bfloat16 rounding, in place.

    Returns:
        {constant name: number of values rounded}.
    """
    names = {info.name for info in weight_constants(model) if info.element_type == "f32"}
    rounded = {}
    for node in model.get_ordered_ops():
        name = node.get_friendly_name()
        if node.get_type_name() != "Constant" or name not in names or name in rounded:
            continue
        data = node.get_data()
        replacement = ov.opset13.constant(round_to_bfloat16(data))
        replacement.set_friendly_name(name)
        node.output(0).replace(replacement.output(0))
        rounded[name] = int(data.size)
    return rounded


def _source_stamp(source: Path) -> dict:
    files = sorted(name for ir in compressed_files(source) for name in (ir, ir.replace(".xml", ".bin")))
    return {"rounding": "bfloat16, round to nearest even, weights only",
            "source": {name: sha256_file(source / name) for name in files}}


def bf16_weight_target(source: Path | str, out: Path | str | None = None) -> Path:
    """The target folder `source` with bf16-rounded weights, written once (again when the source's IRs change).

    Args:
        source: an exported target folder with f32 weights (`utils.export.export_target`).
        out: where to write it (default: beside `source`, named `<source>-bf16-weights`).

    Returns:
        The folder; compile it with the f32 inference hint (`precision="f32"`) to compute in f32.
    """
    source = Path(source)
    out = Path(out) if out is not None else source.with_name(f"{source.name}-bf16-weights")
    stamp = _source_stamp(source)
    if (out / ROUNDED_STAMP).is_file() and json.loads((out / ROUNDED_STAMP).read_text()) == stamp:
        return out
    core = ov.Core()
    with atomic_directory(out, overwrite=True) as staging:
        weight_files = set(stamp["source"])
        for path in source.iterdir():
            if path.is_file() and path.name not in weight_files:
                shutil.copy2(path, staging / path.name)
        counts = {}
        for name in compressed_files(source):
            model = core.read_model(source / name)
            counts[name] = round_weights_to_bfloat16(model)
            if not counts[name]:
                raise ValueError(f"{source / name} has no f32 weights to round (compressed already?); "
                                 f"use the fp32 export")
            ov.save_model(model, staging / name, compress_to_fp16=False)
        (staging / ROUNDED_STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    return out
