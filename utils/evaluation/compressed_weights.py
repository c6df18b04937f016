"""What the weights of a compressed IR are, read back from the IR: storage type, zero point, scale, group size,
and whether compressing again writes the same weights.

`weight_constants` (`utils.export.compression`) says how each weight is stored; this module also follows the
decompression subgraph NNCF adds in front of the op that reads it (OpenVINO's `compression_format` "dequantize":
`Constant -> Convert -> Subtract(zero point) -> Multiply(scale) [-> Reshape]`) to tell what else a compressed weight
carries, so a count of "u8" weights can be explained from the IR itself rather than from the settings asked for.
Docs: https://docs.openvino.ai/2025/openvino-workflow/model-optimization-guide/weight-compression.html and
https://github.com/openvinotoolkit/nncf/blob/develop/docs/compression_algorithms/CompressWeights.md .
"""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import openvino as ov

from utils.export.compression import head_weight, save_ir, weight_constants

__all__ = ["StoredWeight", "stored_weights", "weight_layout", "compresses_identically"]

_WEIGHT_PORTS = {"MatMul": (0, 1), "Gather": (0,), "Convolution": (1,), "GroupConvolution": (1,)}
_PASS_THROUGH = ("Convert", "Reshape", "Transpose")


@dataclass(frozen=True)
class StoredWeight:
    """One weight of an IR as stored, with the quantisation parameters NNCF stored beside it."""

    name: str  # friendly name of the stored Constant
    consumer: str  # the op that reads it: MatMul, Gather, Convolution, GroupConvolution
    head: bool  # the MatMul behind the `logits` output (the lm_head)
    element_type: str  # as stored: "f32" (uncompressed), "u8" (INT8_ASYM), "u4" (INT4_ASYM), ...
    zero_point: str  # element type of its zero point; "" when it has none
    scale: str  # element type of its scale; "" when uncompressed
    per_scale: int  # weights that share one scale: a row (per channel) or a group of input channels; 0: no scale
    per_row: int  # scales per output channel (row): 1 per channel, more when a row is split into groups; 0: none
    shape: tuple[int, ...]  # as stored


def _constant_behind(output: ov.Output) -> ov.Node | None:
    """The Constant an input reads through Convert/Reshape/Transpose, or None when it reads anything else."""
    node = output.get_node()
    while node.get_type_name() in _PASS_THROUGH:
        node = node.input_value(0).get_node()
    return node if node.get_type_name() == "Constant" else None


def _decompression(output: ov.Output) -> tuple[ov.Node | None, ov.Node | None, ov.Node | None]:
    """(stored data, zero point, scale) Constants behind a weight input; None for the parts it lacks."""
    node, zero_point, scale = output.get_node(), None, None
    while node.get_type_name() != "Constant":
        kind = node.get_type_name()
        if kind == "Multiply":
            scale = _constant_behind(node.input_value(1))
        elif kind == "Subtract":
            zero_point = _constant_behind(node.input_value(1))
        elif kind not in _PASS_THROUGH:
            return None, None, None
        node = node.input_value(0).get_node()
    return node, zero_point, scale


def _type(node: ov.Node | None) -> str:
    return "" if node is None else node.get_element_type().get_type_name()


def stored_weights(model: ov.Model) -> list[StoredWeight]:
    """Every weight `weight_constants` finds, with its zero point, scale and how many weights share a scale.

    Args:
        model: an IR as read (compressed or not).

    Returns:
        One `StoredWeight` per weight constant, in graph order.
    """
    names = {info.name for info in weight_constants(model)}
    try:
        head = head_weight(model).name
    except ValueError:  # an IR without a `logits` output: no head
        head = None
    found: dict[str, StoredWeight] = {}
    for node in model.get_ordered_ops():
        for port in _WEIGHT_PORTS.get(node.get_type_name(), ()):
            data, zero_point, scale = _decompression(node.input_value(port))
            if data is None or data.get_friendly_name() not in names or data.get_friendly_name() in found:
                continue
            shape = tuple(data.get_output_shape(0))
            size = math.prod(shape)
            scales = 0 if scale is None else math.prod(scale.get_output_shape(0))
            found[data.get_friendly_name()] = StoredWeight(
                data.get_friendly_name(), node.get_type_name(), data.get_friendly_name() == head, _type(data),
                _type(zero_point), _type(scale), math.prod(shape) // scales if scales else 0, scales // shape[0],
                shape)
    return list(found.values())


def weight_layout(model: ov.Model) -> list[dict]:
    """The weights of an IR counted by what they are: one row per (op, role, storage, zero point, scale, share).

    Returns:
        Rows {"read by", "stored", "zero point", "scale", "weights per scale", "scales per row", "weights"}, the
        head's row named "MatMul (lm_head)", ordered by storage type then op ("-" where a weight has no scale).
    """
    counts = Counter((f"{weight.consumer} (lm_head)" if weight.head else weight.consumer, weight.element_type,
                      weight.zero_point or "-", weight.scale or "-", weight.per_scale or "-", weight.per_row or "-")
                     for weight in stored_weights(model))
    columns = ("read by", "stored", "zero point", "scale", "weights per scale", "scales per row")
    return [dict(zip(columns, key)) | {"weights": count}
            for key, count in sorted(counts.items(), key=lambda item: (item[0][1], str(item[0])))]


def compresses_identically(source: Path | str, compressed: Path | str, name: str, *, weight_format: str) -> bool:
    """Whether compressing `source/name` again writes, byte for byte, the weights file of `compressed/name`.

    NNCF's weight compression without a dataset is a function of the weights alone; this checks it (the `.xml`
    beside may differ in the names NNCF gives its new nodes, so only the weights file is compared).

    Args:
        source: the uncompressed export folder.
        compressed: the folder `compress_folder` wrote from it in `weight_format`.
        name: the IR file to compare (for example the target's language model).
        weight_format: "int8" or "int4".
    """
    with tempfile.TemporaryDirectory() as scratch:
        again = Path(scratch) / name
        save_ir(ov.Core().read_model(Path(source) / name), again, weight_format=weight_format)
        return again.with_suffix(".bin").read_bytes() == (Path(compressed) / name).with_suffix(".bin").read_bytes()
