"""The IR contract between the exporter and the runtime: file names, port names, rt_info and the language-model config.

The exporter (`utils.export`, needs torch) writes by these names and the runtime (`utils.engine`, `utils.pipeline`:
numpy and OpenVINO only) reads by them, so neither imports the other and each name is spelled here only. Layouts,
shapes and why they are so are documented where the IRs are built: `utils.export.language_model` (the target's
text model), `utils.export.vision` (vision and text embeddings), `utils.export.draft` (draft backbone, Markov
head, rt_info).

Port-name functions take the decoder layer index `i`: `past_key(3)` is "past_key.3".

Submodules: `processor` (the processor files of a MiniCPM-OCR folder: image settings, multimodal tokens, chat
template) and `target` (`ExportedTarget`: an exported target folder, read once for every part of the runtime).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openvino as ov

__all__ = [
    "IR_FORMAT_VERSION", "DRAFT_IR_FORMAT_VERSION", "draft_cache_layout_is_current",
    # weight formats
    "COMPRESSED_FORMATS", "WEIGHT_FORMATS",
    # target folder
    "VISION_EMBEDDINGS_NAME", "TEXT_EMBEDDINGS_NAME", "TOKENIZER_NAME", "DETOKENIZER_NAME", "LANGUAGE_MODEL_NAME",
    "LANGUAGE_MODEL_CONFIG", "LanguageModelConfig", "DEFAULT_PREFILL_CHUNK", "HIDDEN_STATES_RT_INFO_KEY",
    "DOWNSAMPLE_MODE_RT_INFO_KEY", "TARGET_MANIFEST",
    # draft folder
    "DRAFT_MODEL", "MARKOV_HEAD_MODEL", "RT_INFO_NAMESPACE", "RT_INFO_KEYS", "WEIGHT_FORMAT_KEY",
    "WEIGHT_COMPRESSION_KEY", "rt_info_path", "DraftInfo", "write_draft_info", "read_draft_info", "read_d2t",
    # ports
    "INPUTS_EMBEDS", "POSITION_IDS", "ATTENTION_MASK", "NUM_LOGITS", "HIDDEN_STATES", "LOGITS", "LAST_HIDDEN_STATE",
    "D2T",
    "ANCHOR_TOKEN_ID", "TOP_K", "TOKEN_IDS", "CONFIDENCES", "PIXEL_VALUES", "TARGET_SIZES", "IMAGE_FEATURES",
    "INPUT_IDS", "past_key", "past_value", "present_key", "present_value", "past_conv_state", "present_conv_window",
    "past_recurrent_state", "present_recurrent_state", "rollback_key", "rollback_delta", "rollback_log_decay",
]

# The layout version of the IRs the exporter writes: bump it when an export changes (2: the verify IR's length is
# dynamic; 3: one language-model IR of dynamic length instead of prefill, decode and verify IRs, so the runtime
# holds its weights once; 4: the attention reads the past keys as rows, not transposed, 19% faster decoding at 3k
# context; 5: the gated delta rule's decay exponents are direct sums, not differences of running sums, which lost
# the state a continued prompt call starts from at bf16, and the rollback outputs each token's log decay), so that
# folders exported by older code are exported again where the suite caches them.
IR_FORMAT_VERSION = 5
# The same for the draft's backbone IR, which the draft folder's own files say nothing of: 2: the context cache is
# read in place, head-major buffers [1, Hkv, M, D] (format 1: sequence-major [1, C, Hkv, D], which the graph
# transposed, concatenated and repeated at every call). `draft_cache_layout_is_current` tells the two apart.
DRAFT_IR_FORMAT_VERSION = 2

# Weight formats: the same four for the target and the draft. fp16 is a save option (`compress_to_fp16`); the
# compressed ones are NNCF weight compression (`utils.export.compression`).
COMPRESSED_FORMATS = ("int8", "int4")
WEIGHT_FORMATS = ("fp32", "fp16", *COMPRESSED_FORMATS)

# Target folder (`utils.export.target`). The tokenizer names are the ones `openvino_genai.Tokenizer` looks for.
VISION_EMBEDDINGS_NAME = "openvino_vision_embeddings_model.xml"
TEXT_EMBEDDINGS_NAME = "openvino_text_embeddings_model.xml"
TOKENIZER_NAME = "openvino_tokenizer.xml"
DETOKENIZER_NAME = "openvino_detokenizer.xml"
# One IR for every call of the text model (prompt chunks, one token, verification blocks): its S is dynamic. The
# name differs from optimum-intel's stateful `openvino_language_model.xml`, whose ports are not these.
LANGUAGE_MODEL_NAME = "openvino_language_model_explicit_state.xml"
LANGUAGE_MODEL_CONFIG = "openvino_language_model_config.json"  # `LanguageModelConfig`
# rt_info of each language-model IR (top level, the key optimum-intel writes for DFlash/Eagle-3 targets): where
# every decoder layer's output is computed; layout in `utils.export.language_model`.
HIDDEN_STATES_RT_INFO_KEY = "hidden_states_decoder_layers"
# rt_info of the vision IR (top level): config.json's `downsample_mode` it computes ("4x" or "16x"), which the image
# preprocessing must share, since it decides the image tokens per tile. Absent on IRs exported before it was
# recorded, when only "4x" could be exported.
DOWNSAMPLE_MODE_RT_INFO_KEY = "downsample_mode"
TARGET_MANIFEST = "openvino_target_export.json"  # what `export_target` exported, from where, with which options

# Draft folder (`utils.export.draft`).
DRAFT_MODEL = "openvino_model.xml"  # the backbone, one call per block
MARKOV_HEAD_MODEL = "openvino_markov_head_model.xml"  # the Markov walk and the confidence head

# rt_info of both draft IRs: strings under `dspark/<key>`, the keys of `DraftInfo` (`RT_INFO_KEYS`), and on
# compressed IRs (draft or target) two more.
RT_INFO_NAMESPACE = "dspark"
WEIGHT_FORMAT_KEY = "weight_format"  # "int8" or "int4"
WEIGHT_COMPRESSION_KEY = "weight_compression"  # the NNCF settings, JSON


def rt_info_path(key: str) -> list[str]:
    """The rt_info path of `dspark/<key>`, as `ov.Model.get_rt_info` and `set_rt_info` take it (a list)."""
    return [RT_INFO_NAMESPACE, key]


# Ports without a layer index. Several IRs share a name where they share the tensor: the text-embedding IR
# outputs the `inputs_embeds` the language model and the draft take; the backbone outputs the `logits` and
# `last_hidden_state` the Markov head takes.
INPUTS_EMBEDS = "inputs_embeds"  # [1, S, H] token (and image) embeddings
POSITION_IDS = "position_ids"  # [1, S] absolute positions
ATTENTION_MASK = "attention_mask"  # [1, S] 1 = token, 0 = pad (language model)
NUM_LOGITS = "num_logits"  # [] language-model input: logits of the last num_logits of the S positions (0..S)
HIDDEN_STATES = "hidden_states"  # target-layer outputs concatenated: language-model output, draft input
LOGITS = "logits"  # behind the head (`lm_head`) of the language model and of the draft
LAST_HIDDEN_STATE = "last_hidden_state"  # [B, H] after the draft's final norm
D2T = "d2t"  # [Vd] draft backbone constant output: draft token j is target token j + d2t[j]
ANCHOR_TOKEN_ID = "anchor_token_id"  # [1] Markov head input: target id of the block's anchor
TOP_K = "top_k"  # [] Markov head input: K of the candidate scorer, 0 for the dense walk
TOKEN_IDS = "token_ids"  # [B] Markov head output: the walk's tokens in target ids
CONFIDENCES = "confidences"  # [B] Markov head output, with a confidence head
PIXEL_VALUES = "pixel_values"  # vision input: a batch of same-size NaViT-packed tiles
TARGET_SIZES = "target_sizes"  # vision input: (h, w) in patches of the batch's tiles
IMAGE_FEATURES = "image_features"  # vision output: the rows the image tokens receive
INPUT_IDS = "input_ids"  # text-embedding input


# Ports per decoder layer i (language model: full-attention K/V or linear-attention state; draft: context K/V).
def past_key(i: int) -> str:
    """Input: cached keys of layer i (language model: sequence-major [1, P, Hkv, D]; draft: a head-major buffer
    [1, Hkv, M, D])."""
    return f"past_key.{i}"


def past_value(i: int) -> str:
    """Input: cached values of layer i, laid out as `past_key(i)`."""
    return f"past_value.{i}"


def draft_cache_layout_is_current(model: ov.Model) -> bool:
    """Whether a draft backbone IR takes its context cache as `DRAFT_IR_FORMAT_VERSION` lays it out: head-major
    [1, Hkv, M, D], the heads static and the positions dynamic (format 1 had them the other way round)."""
    shape = model.input(past_key(0)).get_partial_shape()
    return shape.rank.get_length() == 4 and shape[1].is_static and shape[2].is_dynamic


def present_key(i: int) -> str:
    """Output: keys of the call's new positions only (the runtime appends them to `past_key(i)`)."""
    return f"present_key.{i}"


def present_value(i: int) -> str:
    """Output: values of the call's new positions only."""
    return f"present_value.{i}"


def past_conv_state(i: int) -> str:
    """Input: the conv state of linear-attention layer i."""
    return f"past_conv_state.{i}"


def present_conv_window(i: int) -> str:
    """Output: `past_conv_state(i)` followed by the block's conv inputs."""
    return f"present_conv_window.{i}"


def past_recurrent_state(i: int) -> str:
    """Input: the gated-delta recurrent state of linear-attention layer i."""
    return f"past_recurrent_state.{i}"


def present_recurrent_state(i: int) -> str:
    """Output: the recurrent state after the whole block."""
    return f"present_recurrent_state.{i}"


def rollback_key(i: int) -> str:
    """Verify output: the block's normalised keys, for the rollback of layer i's recurrent state."""
    return f"rollback_key.{i}"


def rollback_delta(i: int) -> str:
    """Verify output: the block's per-token state corrections."""
    return f"rollback_delta.{i}"


def rollback_log_decay(i: int) -> str:
    """Verify output: each token's log decay g_t (the host sums them: `rebuild_recurrent_state`)."""
    return f"rollback_log_decay.{i}"


# Tokens of a prefill call: a tiny page's whole prompt is one call. Up to IR format 4 a call that continued a prompt
# at bf16 started from a lost linear-attention state, and this default hid it on tiny pages; since format 5 a prompt
# in several calls reads as one does (`docs/performance.md`, `tests/test_chunked_prefill.py`).
DEFAULT_PREFILL_CHUNK = 256


@dataclass(frozen=True)
class LanguageModelConfig:
    """`LANGUAGE_MODEL_CONFIG`: what `export_language_model` wrote, as `LanguageModelSession` reads it.

    The IR `LANGUAGE_MODEL_NAME` takes 1 to `max_tokens` tokens per call; a runtime verifies blocks of up to
    `verify_length` tokens and feeds a prompt in chunks of up to `prefill_chunk`.
    """

    weight_format: str  # one of WEIGHT_FORMATS
    hidden_size: int  # H
    vocab_size: int  # V
    hidden_layer_ids: tuple[int, ...]  # decoder layers whose outputs `hidden_states` concatenates, in order
    layer_types: tuple[str, ...]  # per decoder layer, as the HF config has them ("full_attention", ...)
    verify_length: int  # the most tokens of a verification block: anchor + drafts
    prefill_chunk: int  # the most tokens of a prompt chunk
    format_version: int = IR_FORMAT_VERSION

    def __post_init__(self):
        for field in ("verify_length", "prefill_chunk"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field}={getattr(self, field)} must be >= 1")

    @property
    def max_tokens(self) -> int:
        """The most tokens one call of the IR takes."""
        return max(self.verify_length, self.prefill_chunk)

    def to_json(self) -> dict:
        """The JSON object, with the IR's `file` and `max_tokens` for readers outside this package."""
        return {"format_version": self.format_version, "file": LANGUAGE_MODEL_NAME, "weight_format": self.weight_format,
                "hidden_size": self.hidden_size, "vocab_size": self.vocab_size,
                "hidden_layer_ids": list(self.hidden_layer_ids), "layer_types": list(self.layer_types),
                "verify_length": self.verify_length, "prefill_chunk": self.prefill_chunk, "max_tokens": self.max_tokens}

    @classmethod
    def from_json(cls, raw: dict, *, source: str = LANGUAGE_MODEL_CONFIG) -> LanguageModelConfig:
        """Reads `to_json`'s object; ValueError for another layout version (an older export: export it again)."""
        version = raw.get("format_version")
        if version != IR_FORMAT_VERSION:
            raise ValueError(f"{source}: format_version={version}, this code reads {IR_FORMAT_VERSION} (one "
                             f"language-model IR); export the target again with python -m utils.export target")
        return cls(weight_format=raw["weight_format"], hidden_size=raw["hidden_size"], vocab_size=raw["vocab_size"],
                   hidden_layer_ids=tuple(raw["hidden_layer_ids"]), layer_types=tuple(raw["layer_types"]),
                   verify_length=raw["verify_length"], prefill_chunk=raw["prefill_chunk"], format_version=version)

    def write(self, folder: Path | str) -> None:
        """Writes `folder / LANGUAGE_MODEL_CONFIG`."""
        (Path(folder) / LANGUAGE_MODEL_CONFIG).write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def read(cls, folder: Path | str) -> LanguageModelConfig:
        """Reads `folder / LANGUAGE_MODEL_CONFIG`; ValueError when the folder has none or an older layout."""
        path = Path(folder) / LANGUAGE_MODEL_CONFIG
        if not path.is_file():
            raise ValueError(f"{folder} has no {LANGUAGE_MODEL_CONFIG}; export the language model first")
        return cls.from_json(json.loads(path.read_text()), source=str(path))


@dataclass(frozen=True)
class DraftInfo:
    """What a runtime needs to drive the draft, stored as the rt_info of both draft IRs (see `utils.export.draft`)."""

    draft_mode: str  # "dspark"
    target_layer_ids: tuple[int, ...]  # target decoder layers whose outputs feed `hidden_states`, in order
    mask_token_id: int  # target id that fills the block after the anchor
    block_size: int  # B: positions per block, the anchor included
    vocab_size: int  # input (target) vocabulary that the anchor and `markov_w1` index
    draft_vocab_size: int  # Vd: what the draft predicts
    markov_rank: int  # r of the Markov head
    markov_head_type: str  # "vanilla"
    top_k: int  # default K of the Top-K candidate scorer, min(64, Vd)
    confidence_head: bool  # whether the Markov head IR returns `confidences`

    def to_rt_info(self) -> dict[str, str]:
        """key -> string value, as stored under `dspark/` (lists as JSON, booleans as "true"/"false")."""
        def text(value):
            if isinstance(value, bool):
                return "true" if value else "false"
            return json.dumps(list(value)) if isinstance(value, tuple) else str(value)

        return {key: text(getattr(self, key)) for key in RT_INFO_KEYS}


RT_INFO_KEYS = tuple(field.name for field in dataclasses.fields(DraftInfo))


def write_draft_info(model: ov.Model, info: DraftInfo) -> None:
    """Stores `info` as the `dspark/*` rt_info of a draft or Markov head IR."""
    for key, value in info.to_rt_info().items():
        model.set_rt_info(value, rt_info_path(key))


def read_draft_info(model: ov.Model, *, source: str = "model") -> DraftInfo:
    """Reads the `dspark/*` rt_info of a draft or Markov head IR.

    Raises:
        ValueError: naming the first missing key.
    """
    values = {}
    for key in RT_INFO_KEYS:
        if not model.has_rt_info(rt_info_path(key)):
            raise ValueError(f"{source}: rt_info '{RT_INFO_NAMESPACE}/{key}' is missing; is this a DSpark draft IR?")
        values[key] = model.get_rt_info(rt_info_path(key)).astype(str)
    return DraftInfo(
        draft_mode=values["draft_mode"],
        target_layer_ids=tuple(int(i) for i in json.loads(values["target_layer_ids"])),
        mask_token_id=int(values["mask_token_id"]),
        block_size=int(values["block_size"]),
        vocab_size=int(values["vocab_size"]),
        draft_vocab_size=int(values["draft_vocab_size"]),
        markov_rank=int(values["markov_rank"]),
        markov_head_type=values["markov_head_type"],
        top_k=int(values["top_k"]),
        confidence_head=values["confidence_head"] == "true",
    )


def read_d2t(model: ov.Model) -> np.ndarray:
    """[Vd] int64 delta-encoded `d2t`, read from the constant behind the backbone's `d2t` output."""
    producer = model.output(D2T).get_node().input_value(0).get_node()
    if producer.get_type_name() != "Constant":
        raise ValueError(f"the '{D2T}' output comes from a {producer.get_type_name()}, expected a Constant")
    return producer.get_data().astype(np.int64)
