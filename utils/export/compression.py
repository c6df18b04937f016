"""NNCF weight compression of the exported IRs: INT8 or INT4 weights, data-free and deterministic.

`export_target` and `export_draft` with `weight_format="int8"` or `"int4"` compress each IR in memory, before it
is saved (`save_ir`), so no uncompressed copy is written; `compress_folder(SRC, OUT, weight_format="int4")`
compresses a folder exported in fp32 (or fp16) into OUT, atomically, copying every other file, with the same
function: both write the same folder. What each format means, IR by IR:

| IR | int8 | int4 |
|---|---|---|
| draft backbone `openvino_model.xml` | INT8_ASYM | INT4_ASYM groups; `lm_head` INT8_ASYM |
| target language model (`LANGUAGE_MODEL_NAME`) | INT8_ASYM | INT4_ASYM groups; `lm_head` INT8_ASYM |
| Markov head `openvino_markov_head_model.xml` | INT8_ASYM | INT8_ASYM |
| target vision and text embeddings | INT8_ASYM | INT8_ASYM |

- INT8_ASYM: one scale and zero point per output channel of a MatMul, per row of a table read by index
  (Gather), per output channel of a convolution. It is `optimum-cli --weight-format int8`, the seed's target.
- INT4_ASYM, `group_size` 128, `ratio` 1.0 (every MatMul of the transformer IRs, no mixed precision, no
  calibration data): optimum-intel's default for `--weight-format int4`. Where 128 does not divide a
  MatMul's input channels, NNCF's ADJUST fallback takes the largest power of two >= `min_group_size` (32)
  that does: 64 for the tiny pair's hidden size of 64.
- The **head** (the MatMul that produces `logits`: the draft `lm_head` over the draft vocabulary, the
  target's `lm_head`, tied to its embeddings) stays INT8 under INT4, as optimum-intel #2099 does: its
  rounding moves the very argmax that drafting and verification compare. NNCF's own rule (`all_layers=False`)
  keeps "the last MatMul in topological order" in INT8, which is a position, not the head; so the INT4 pass
  ignores the head by name (`all_layers=True` for the others), and an INT8 pass then compresses it.
- The Markov tables (`markov_w1` [V, r], 248,100 x r for the real draft; `markov_w2` [Vd, r]) are read by
  index and added to the logits as a bias: INT8 per row, never INT4, as NNCF treats embedding tables; each
  is one Constant of the Markov head IR (`utils.export.markov_head`). The target's text embeddings (which also
  embed the draft's block) and the vision IR get INT8, as optimum-intel does for the non-language parts of a
  VLM under INT4.
- Left in floating point: norms, biases, RoPE frequencies, the gated-delta decay parameters (elementwise,
  small), and integer constants (`d2t`, draft-to-target ids).

Compressed IRs record `dspark/weight_format` ("int8"/"int4") and `dspark/weight_compression` (the settings,
JSON) in their rt_info. A folder whose IRs already hold integer weights is refused: compressing again would
stack rounding errors, so compression always starts from the uncompressed export.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import openvino as ov

from utils.contract import (COMPRESSED_FORMATS, DRAFT_MODEL, LANGUAGE_MODEL_CONFIG, LANGUAGE_MODEL_NAME, LOGITS,
                            MARKOV_HEAD_MODEL, TARGET_MANIFEST, TEXT_EMBEDDINGS_NAME, VISION_EMBEDDINGS_NAME,
                            WEIGHT_COMPRESSION_KEY, WEIGHT_FORMAT_KEY, WEIGHT_FORMATS, LanguageModelConfig,
                            rt_info_path)
from utils.files import atomic_directory

__all__ = ["CompressionConfig", "WeightInfo", "weight_constants", "head_weight", "ir_weight_format",
           "compress_model", "save_ir", "compressed_files", "compress_folder"]

_INTEGER_TYPES = ("u8", "i8", "u4", "i4")
_DECOMPRESSION_OPS = ("Convert", "Subtract", "Multiply", "Reshape")
_WEIGHT_PORTS = {"MatMul": (0, 1), "Gather": (0,), "Convolution": (1,), "GroupConvolution": (1,)}


@dataclass(frozen=True)
class CompressionConfig:
    """INT4 settings (INT8 is per channel and has none); see the module docstring for why these."""

    group_size: int = 128
    ratio: float = 1.0  # share of the transformer MatMuls in INT4; the rest INT8
    min_group_size: int = 32  # smallest group NNCF's ADJUST fallback may choose

    def __post_init__(self):
        if self.group_size < 1 or self.min_group_size < 1:
            raise ValueError(f"group_size={self.group_size} and min_group_size={self.min_group_size} must be >= 1")
        if not 0 < self.ratio <= 1:
            raise ValueError(f"ratio={self.ratio} must be in (0, 1]")


@dataclass(frozen=True)
class WeightInfo:
    """One weight constant as stored in an IR."""

    name: str  # friendly name of the stored Constant
    element_type: str  # as stored: "f32", "f16", "u8" (INT8_ASYM), "u4" (INT4_ASYM), ...
    shape: tuple[int, ...]  # as stored: INT4 groups split the input channels into [groups, group_size]
    consumer: str  # the op that reads it: MatMul, Gather, Convolution, GroupConvolution


def _is_constant(node: ov.Node) -> bool:
    """True when the node computes from constants only (a Constant or a decompression subgraph of them)."""
    if node.get_type_name() == "Constant":
        return True
    return node.get_type_name() in _DECOMPRESSION_OPS and all(
        _is_constant(value.get_node()) for value in node.input_values())


def _weight_constant(node_input: ov.Output) -> ov.Node | None:
    """The stored Constant behind an op input, through a decompression subgraph (Convert/Subtract/Multiply/...).

    An input that mixes in activations (e.g. an RMSNorm scale times the hidden states) is no weight.
    """
    node = node_input.get_node()
    if not _is_constant(node):
        return None
    while node.get_type_name() != "Constant":
        node = node.input_value(0).get_node()  # the data side; scales and zero points are the other inputs
    if len(node.get_output_shape(0)) < 2:
        return None
    element_type = node.get_element_type()
    return node if element_type.is_real() or element_type.get_type_name() in _INTEGER_TYPES else None


def weight_constants(model: ov.Model) -> list[WeightInfo]:
    """The weights of MatMuls, Gathers and convolutions, in graph order; each once.

    Args:
        model: an IR as read or compressed.

    Returns:
        One `WeightInfo` per weight constant.
    """
    found: dict[str, WeightInfo] = {}
    for node in model.get_ordered_ops():
        for port in _WEIGHT_PORTS.get(node.get_type_name(), ()):
            constant = _weight_constant(node.input_value(port))
            if constant is not None and constant.get_friendly_name() not in found:
                found[constant.get_friendly_name()] = WeightInfo(
                    constant.get_friendly_name(), constant.get_element_type().get_type_name(),
                    tuple(constant.get_output_shape(0)), node.get_type_name())
    return list(found.values())


def _head_matmul(model: ov.Model) -> ov.Node | None:
    """The MatMul that produces the `logits` output, or None when the model has no such output."""
    names = {name for output in model.outputs for name in output.get_names()}
    if LOGITS not in names:
        return None
    node = model.output(LOGITS).get_node().input_value(0).get_node()
    if node.get_type_name() != "MatMul":
        raise ValueError(f"the '{LOGITS}' output comes from a {node.get_type_name()}, expected the lm_head MatMul")
    return node


def head_weight(model: ov.Model) -> WeightInfo:
    """The weight of the head (`lm_head`): the MatMul behind the `logits` output.

    Raises:
        ValueError: the model has no `logits` output, or no MatMul with a constant weight behind it.
    """
    node = _head_matmul(model)
    constants = [] if node is None else [c for c in map(_weight_constant, node.input_values()) if c is not None]
    if not constants:
        raise ValueError(f"the model has no '{LOGITS}' output computed by a MatMul with a constant weight")
    name = constants[0].get_friendly_name()
    return next(info for info in weight_constants(model) if info.name == name)


def ir_weight_format(file_name: str, weight_format: str) -> str:
    """What `weight_format` means for one IR file: INT4 only for the transformer IRs, INT8 for the rest."""
    if weight_format not in COMPRESSED_FORMATS:
        raise ValueError(f"weight_format={weight_format!r} must be one of {COMPRESSED_FORMATS}")
    transformer = file_name in (DRAFT_MODEL, LANGUAGE_MODEL_NAME)
    return weight_format if transformer else "int8"


@contextlib.contextmanager
def _quiet_nncf():
    """Hides NNCF's per-call bit-width tables (a folder takes several calls); warnings still show.

    Also torch's note, at NNCF's first import, that it found no CUDA runtime: compression runs on the CPU.
    """
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    import nncf

    logger = logging.getLogger("nncf")
    level = logger.level
    nncf.set_log_level(logging.WARNING)
    try:
        yield nncf
    finally:
        nncf.set_log_level(level)


def _compress_int8_everywhere(model: ov.Model, nncf) -> ov.Model:
    """INT8_ASYM for every weight still in floating point."""
    if not any(info.element_type not in _INTEGER_TYPES for info in weight_constants(model)):
        return model
    return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)


def compress_model(model: ov.Model, *, weight_format: str, config: CompressionConfig = CompressionConfig()
                   ) -> ov.Model:
    """Compresses the weights of one IR (in place where NNCF allows) and records it in the rt_info.

    int8: INT8_ASYM everywhere. int4: INT4_ASYM groups for every MatMul except the head behind `logits`,
    then INT8_ASYM for what is left (the head, tables, convolutions). `save_ir` picks the format of a file of
    an export folder (`ir_weight_format`).

    Args:
        model: an uncompressed IR (fp32 or fp16 weights).
        weight_format: "int8" or "int4".
        config: INT4 group size, ratio and smallest adjusted group.

    Returns:
        The compressed model.
    """
    if weight_format not in COMPRESSED_FORMATS:
        raise ValueError(f"weight_format={weight_format!r} must be one of {COMPRESSED_FORMATS}")
    _check_uncompressed(model, source="model")
    with _quiet_nncf() as nncf:
        if weight_format == "int4":
            from nncf.quantization.advanced_parameters import AdvancedCompressionParameters, GroupSizeFallbackMode

            head = _head_matmul(model)
            model = nncf.compress_weights(
                model, mode=nncf.CompressWeightsMode.INT4_ASYM, group_size=config.group_size, ratio=config.ratio,
                all_layers=True, ignored_scope=nncf.IgnoredScope(names=[head.get_friendly_name()] if head else []),
                advanced_parameters=AdvancedCompressionParameters(
                    group_size_fallback_mode=GroupSizeFallbackMode.ADJUST,
                    min_adjusted_group_size=config.min_group_size))
        model = _compress_int8_everywhere(model, nncf)
    settings = {"int8": {"mode": "int8_asym"},
                "int4": {"mode": "int4_asym", **asdict(config), "head": "int8_asym", "others": "int8_asym"}}
    model.set_rt_info(weight_format, rt_info_path(WEIGHT_FORMAT_KEY))
    model.set_rt_info(json.dumps(settings[weight_format]), rt_info_path(WEIGHT_COMPRESSION_KEY))
    return model


def _check_uncompressed(model: ov.Model, *, source: str) -> None:
    if any(node.get_type_name() == "If" for node in model.get_ordered_ops()):  # NNCF leaves `If` bodies as they are
        raise ValueError(f"{source} has an `If` op: an IR layout of an older export (its Markov head); export it "
                         f"again with python -m utils.export")
    key = rt_info_path(WEIGHT_FORMAT_KEY)
    if model.has_rt_info(key):
        recorded = model.get_rt_info(key).astype(str)
        raise ValueError(f"{source} already has {recorded} weights (rt_info '{'/'.join(key)}'); "
                         f"compress the uncompressed (fp32) export instead: compressing twice stacks rounding errors")
    integer = sorted({info.element_type for info in weight_constants(model)} & set(_INTEGER_TYPES))
    if integer:
        raise ValueError(f"{source} already has {'/'.join(integer)} weights (compressed elsewhere, e.g. by "
                         f"optimum-cli); compress the uncompressed (fp32) export instead")


def save_ir(model: ov.Model, path: Path, *, weight_format: str, config: CompressionConfig = CompressionConfig()
            ) -> None:
    """Saves one IR of an export folder in `weight_format`: the one function every export and `compress_folder` use.

    fp32 as it is; fp16 stored in fp16 (`compress_to_fp16`); int8/int4 compressed in memory first (`compress_model`,
    in the format `ir_weight_format` gives the file), so no uncompressed copy reaches the disk.

    Args:
        model: the uncompressed IR (changed in place when compressed).
        path: where to write it; its name picks the format of the file.
        weight_format: one of `WEIGHT_FORMATS`.
        config: INT4 group size, ratio and smallest adjusted group.
    """
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format={weight_format!r} must be one of {WEIGHT_FORMATS}")
    if weight_format in COMPRESSED_FORMATS:
        model = compress_model(model, weight_format=ir_weight_format(path.name, weight_format), config=config)
    ov.save_model(model, path, compress_to_fp16=weight_format == "fp16")


def compressed_files(folder: Path | str) -> tuple[str, ...]:
    """The IR files of an export folder that carry weights, for a draft or a target folder.

    Raises:
        ValueError: the folder is neither a draft export nor a target export.
    """
    folder = Path(folder)
    if (folder / DRAFT_MODEL).is_file():
        return DRAFT_MODEL, MARKOV_HEAD_MODEL
    if (folder / LANGUAGE_MODEL_CONFIG).is_file():
        return VISION_EMBEDDINGS_NAME, TEXT_EMBEDDINGS_NAME, LANGUAGE_MODEL_NAME
    raise ValueError(f"{folder} is neither a draft export ({DRAFT_MODEL}) nor a target export "
                     f"({LANGUAGE_MODEL_CONFIG}); export it first with python -m utils.export")


def _record_format_in_manifests(folder: Path, weight_format: str) -> None:
    """The target's JSON descriptions name the weight format too; the draft has only rt_info."""
    if (folder / LANGUAGE_MODEL_CONFIG).is_file():
        dataclasses.replace(LanguageModelConfig.read(folder), weight_format=weight_format).write(folder)
    manifest = folder / TARGET_MANIFEST
    if manifest.is_file():
        description = json.loads(manifest.read_text())
        manifest.write_text(json.dumps(description | {"weight_format": weight_format}, indent=2) + "\n")


def compress_folder(source: Path | str, out: Path | str, *, weight_format: str,
                    config: CompressionConfig = CompressionConfig(), overwrite: bool = False) -> Path:
    """Compresses an exported target or draft folder into `out`, atomically; other files are copied.

    Args:
        source: a folder written by `export_target` or `export_draft` with fp32 (or fp16) weights.
        out: the folder to create.
        weight_format: "int8" or "int4" (per IR: `ir_weight_format`).
        config: INT4 group size, ratio and smallest adjusted group.
        overwrite: replace an existing `out`.

    Returns:
        `out`.

    Raises:
        ValueError: `source` is not an export folder, or its IRs are already compressed (nothing is written).
        FileExistsError: `out` exists and `overwrite` is False.
    """
    if weight_format not in COMPRESSED_FORMATS:
        raise ValueError(f"weight_format={weight_format!r} must be one of {COMPRESSED_FORMATS}")
    source, out = Path(source), Path(out)
    if source.resolve() == out.resolve():
        raise ValueError(f"out={out} must differ from the source folder")
    names = compressed_files(source)
    core = ov.Core()
    models = {name: core.read_model(source / name) for name in names}
    for name, model in models.items():
        _check_uncompressed(model, source=str(source / name))
    with atomic_directory(out, overwrite=overwrite) as staging:
        weight_files = {Path(name).with_suffix(suffix).name for name in names for suffix in (".xml", ".bin")}
        for path in source.iterdir():
            if path.is_file() and path.name not in weight_files:
                shutil.copy2(path, staging / path.name)
        for name, model in models.items():
            save_ir(model, staging / name, weight_format=weight_format, config=config)
        _record_format_in_manifests(staging, weight_format)
    return out
