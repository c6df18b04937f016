"""Loading and validating a DSpark draft folder (safetensors only, numpy only: no torch, no remote code).

Layout of a draft folder (openbmb/MiniCPM-OCR-1.0-DSpark):
    config.json            architectures ["Qwen3DSparkModel"], sizes, `dflash_config`
    model.safetensors      11 tensors per layer, fc, hidden_norm, norm, lm_head, Markov head, confidence head, d2t
    local-to-target.json   absolute target ids of the draft vocabulary: the ground truth for `d2t`
    export-audit.json      hashes and vocabulary coverage (informative)
"""

from __future__ import annotations

import dataclasses
import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from utils.checkpoint.config import DraftValidationError, DSparkConfig, check_layer_ids

__all__ = ["DRAFT_WEIGHTS", "DRAFT_WEIGHTS_INDEX", "LOCAL_TO_TARGET", "EXPORT_AUDIT", "LAYER_TENSORS",
           "draft_tensor_shapes", "DraftCheckpoint", "load_draft_checkpoint", "TargetSpec", "check_draft_fits_target",
           "check_config_fits_target"]

DRAFT_WEIGHTS = "model.safetensors"
DRAFT_WEIGHTS_INDEX = "model.safetensors.index.json"
LOCAL_TO_TARGET = "local-to-target.json"
EXPORT_AUDIT = "export-audit.json"

# The 11 tensors of one draft layer (a Qwen3 decoder layer with q/k norm).
LAYER_TENSORS = (
    "input_layernorm.weight", "post_attention_layernorm.weight",
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
)
# Tensors real loaders (vLLM, DeepSpec) skip: the target's embedding table, which some checkpoints carry (the
# draft embeds with the target's), the inverse vocabulary map `t2d`, and a `mask_embedding` they do not use.
_IGNORED = ("embed_tokens.weight", "t2d", "mask_embedding", "mask_embedding.weight")
_LOCAL_TO_TARGET_KEYS = ("local_to_target", "target_ids", "ids")  # a list under one of these, in a JSON object
_SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32, "F64": np.float64}


def draft_tensor_shapes(config: DSparkConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor a DSpark checkpoint with this config may hold."""
    hidden, head_dim, inter = config.hidden_size, config.head_dim, config.intermediate_size
    q_size, kv_size = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
    per_layer = {
        "input_layernorm.weight": (hidden,),
        "post_attention_layernorm.weight": (hidden,),
        "self_attn.q_proj.weight": (q_size, hidden),
        "self_attn.k_proj.weight": (kv_size, hidden),
        "self_attn.v_proj.weight": (kv_size, hidden),
        "self_attn.o_proj.weight": (hidden, q_size),
        "self_attn.q_norm.weight": (head_dim,),
        "self_attn.k_norm.weight": (head_dim,),
        "mlp.gate_proj.weight": (inter, hidden),
        "mlp.up_proj.weight": (inter, hidden),
        "mlp.down_proj.weight": (hidden, inter),
    }
    shapes = {f"layers.{i}.{name}": shape for i in range(config.num_hidden_layers) for name, shape in per_layer.items()}
    shapes |= {
        "fc.weight": (hidden, len(config.target_layer_ids) * hidden),
        "hidden_norm.weight": (hidden,),
        "norm.weight": (hidden,),
        "lm_head.weight": (config.draft_vocab_size, hidden),
        "d2t": (config.draft_vocab_size,),
    }
    if config.markov_rank:
        shapes |= {"markov_head.markov_w1.weight": (config.vocab_size, config.markov_rank),
                   "markov_head.markov_w2.weight": (config.draft_vocab_size, config.markov_rank)}
    if config.enable_confidence_head:
        width = hidden + (config.markov_rank if config.confidence_head_with_markov else 0)
        shapes |= {"confidence_head.proj.weight": (1, width), "confidence_head.proj.bias": (1,)}
    return shapes


@dataclass(frozen=True)
class DraftCheckpoint:
    """A validated draft: its config, its tensors (float32 / int64) and the absolute target id of each draft token."""

    folder: Path
    config: DSparkConfig
    tensors: dict[str, np.ndarray]
    target_ids: np.ndarray  # [draft_vocab_size] int64: draft token i is target token target_ids[i]


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Reads a safetensors file into numpy, except the `_IGNORED` tensors; BF16 is widened to float32 (numpy has
    no bfloat16)."""
    data = path.read_bytes()
    try:
        (header_size,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + header_size])
    except (struct.error, ValueError) as error:
        raise DraftValidationError(f"{path}: not a safetensors file ({error})") from error
    body = memoryview(data)[8 + header_size:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or name in _IGNORED:  # not even decoded: real loaders skip them too
            continue
        start, end = info["data_offsets"]
        raw = body[start:end]
        if info["dtype"] == "BF16":
            array = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] in _SAFETENSORS_DTYPES:
            array = np.frombuffer(raw, dtype=_SAFETENSORS_DTYPES[info["dtype"]])
        else:
            raise DraftValidationError(f"{path}: tensor '{name}' has unsupported dtype {info['dtype']}")
        tensors[name] = array.reshape(info["shape"])
    return tensors


def _read_weights(folder: Path) -> dict[str, np.ndarray]:
    single, index = folder / DRAFT_WEIGHTS, folder / DRAFT_WEIGHTS_INDEX
    if single.is_file():
        return _read_safetensors(single)
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return {name: array for shard in shards for name, array in _read_safetensors(folder / shard).items()}
    pickles = sorted(path.name for path in folder.glob("*.bin")) + sorted(path.name for path in folder.glob("*.pt"))
    hint = f" (found {pickles}: pickle checkpoints can run code and are not loaded)" if pickles else ""
    raise DraftValidationError(f"{single}: not found; the draft weights must be safetensors{hint}")


def _check_tensors(folder: Path, config: DSparkConfig, tensors: dict[str, np.ndarray]) -> None:
    source = folder / DRAFT_WEIGHTS
    expected = draft_tensor_shapes(config)
    for name in ("lm_head.weight", "d2t"):
        if name not in tensors and config.is_pruned:
            raise DraftValidationError(
                f"{source}: tensor '{name}' is missing, but config.json has draft_vocab_size="
                f"{config.draft_vocab_size} < vocab_size={config.vocab_size} (a pruned vocabulary needs it; "
                f"loading without it would keep random values)")
    optional = () if config.is_pruned else ("lm_head.weight", "d2t")
    missing = [name for name in expected if name not in tensors and name not in optional]
    if missing:
        raise DraftValidationError(f"{source}: missing tensors {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    unknown = [name for name in tensors if name not in expected]
    if unknown:
        raise DraftValidationError(f"{source}: unexpected tensors {unknown[:5]} for this config.json")
    for name, shape in expected.items():
        if name in tensors and tuple(tensors[name].shape) != shape:
            raise DraftValidationError(f"{source}: tensor '{name}' has shape {tuple(tensors[name].shape)}, "
                                       f"config.json implies {shape}")


def _complete_from_tensors(config: DSparkConfig, tensors: dict[str, np.ndarray]) -> DSparkConfig:
    """Fills in the `INFERABLE` fields config.json left out, from the tensors that imply them: `head_dim` from
    the q-norm weight, the confidence-head flags from the presence and width of its projection."""
    updates = {}
    q_norm = tensors.get("layers.0.self_attn.q_norm.weight")
    if "head_dim" in config.defaulted and q_norm is not None:
        updates["head_dim"] = int(q_norm.shape[0])
    projection = tensors.get("confidence_head.proj.weight")
    if "enable_confidence_head" in config.defaulted:
        updates["enable_confidence_head"] = projection is not None
    if "confidence_head_with_markov" in config.defaulted and projection is not None:
        updates["confidence_head_with_markov"] = bool(config.markov_rank) and (
            projection.shape[-1] == config.hidden_size + config.markov_rank)
    return dataclasses.replace(config, **updates) if updates else config


def _read_local_to_target(path: Path) -> np.ndarray:
    """The absolute target ids listed in `local-to-target.json`: a JSON list, a list under one of
    `_LOCAL_TO_TARGET_KEYS`, or an object mapping "0", "1", ... to ids."""
    try:
        listed = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise DraftValidationError(f"{path}: not valid JSON ({error})") from error
    if isinstance(listed, dict):
        key = next((key for key in _LOCAL_TO_TARGET_KEYS if isinstance(listed.get(key), list)), None)
        if key is not None:
            listed = listed[key]
        elif listed and all(isinstance(k, str) and k.isdigit() for k in listed):
            if sorted(int(k) for k in listed) != list(range(len(listed))):
                raise DraftValidationError(f"{path}: its keys are not the draft ids 0 .. {len(listed) - 1}")
            listed = [listed[str(index)] for index in range(len(listed))]
    if not isinstance(listed, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in listed):
        raise DraftValidationError(
            f"{path}: expected a list of target ids (or an object with one under {list(_LOCAL_TO_TARGET_KEYS)}, "
            f"or mapping '0', '1', ... to ids), found {type(listed).__name__}")
    return np.asarray(listed, dtype=np.int64)


def _target_ids(folder: Path, config: DSparkConfig, tensors: dict[str, np.ndarray]) -> np.ndarray:
    draft_ids = np.arange(config.draft_vocab_size, dtype=np.int64)
    d2t = tensors.get("d2t")
    if d2t is not None and not np.issubdtype(d2t.dtype, np.integer):
        raise DraftValidationError(f"{folder / DRAFT_WEIGHTS}: tensor 'd2t' has dtype {d2t.dtype}, expected integers")
    target_ids = draft_ids if d2t is None else draft_ids + d2t.astype(np.int64)
    source = f"{folder / DRAFT_WEIGHTS}: d2t"
    if target_ids.min() < 0 or target_ids.max() >= config.vocab_size:
        bad = int(np.flatnonzero((target_ids < 0) | (target_ids >= config.vocab_size))[0])
        raise DraftValidationError(f"{source}[{bad}] maps draft token {bad} to target id {int(target_ids[bad])}, "
                                   f"outside the vocabulary [0, {config.vocab_size})")
    unique, counts = np.unique(target_ids, return_counts=True)
    if (counts > 1).any():
        raise DraftValidationError(f"{source} maps several draft tokens to target id {int(unique[counts > 1][0])}")
    mapping = folder / LOCAL_TO_TARGET
    if mapping.is_file():
        listed = _read_local_to_target(mapping)
        if listed.shape != target_ids.shape:
            raise DraftValidationError(f"{mapping}: lists {listed.size} ids, draft_vocab_size is "
                                       f"{config.draft_vocab_size}")
        if not np.array_equal(listed, target_ids):
            bad = int(np.flatnonzero(listed != target_ids)[0])
            raise DraftValidationError(
                f"{source} disagrees with {mapping.name} at draft token {bad}: i + d2t[i] = {int(target_ids[bad])}, "
                f"{mapping.name} says {int(listed[bad])} (is d2t delta-encoded?)")
    elif config.is_pruned:
        raise DraftValidationError(f"{mapping}: not found; a pruned draft ships its absolute target ids to check d2t")
    return target_ids


def load_draft_checkpoint(folder: Path | str, *, drafts_per_step: int | None = None) -> DraftCheckpoint:
    """Loads a DSpark draft folder and validates config, tensor names and shapes, `d2t` and `local-to-target.json`.

    `drafts_per_step` overrides the fields of config.json that state them (`DSparkConfig.from_dict`).

    Raises:
        DraftValidationError: naming the file and field that is wrong.
    """
    folder = Path(folder)
    config = DSparkConfig.from_folder(folder, drafts_per_step=drafts_per_step)
    tensors = _read_weights(folder)
    config = _complete_from_tensors(config, tensors)
    _check_tensors(folder, config, tensors)
    target_ids = _target_ids(folder, config, tensors)
    floats = {name: array.astype(np.float32, copy=False) for name, array in tensors.items() if name != "d2t"}
    return DraftCheckpoint(folder, config, floats, target_ids)


@dataclass(frozen=True)
class TargetSpec:
    """The facts about a target that decide whether a draft fits it."""

    hidden_size: int
    vocab_size: int  # embedding rows
    num_hidden_layers: int

    @classmethod
    def from_folder(cls, folder: Path | str) -> "TargetSpec":
        """Reads a MiniCPM-OCR `config.json` (its `text_config`), or a plain text-model config."""
        raw = json.loads((Path(folder) / "config.json").read_text())
        text = raw.get("text_config", raw)
        return cls(int(text["hidden_size"]), int(text["vocab_size"]), int(text["num_hidden_layers"]))


def check_draft_fits_target(draft: DraftCheckpoint, target: TargetSpec) -> None:
    """Raises DraftValidationError when the draft was made for another target (sizes, vocabulary, layers)."""
    check_config_fits_target(draft.config, target, source=str(draft.folder / "config.json"))


def check_config_fits_target(config: DSparkConfig, target: TargetSpec, *, source: str) -> None:
    """`check_draft_fits_target` from the draft's config alone (an exported draft folder has no checkpoint)."""
    if config.hidden_size != target.hidden_size:
        raise DraftValidationError(f"{source}: hidden_size={config.hidden_size} but the target's is "
                                   f"{target.hidden_size}: this draft was made for another target")
    if config.vocab_size > target.vocab_size:
        raise DraftValidationError(f"{source}: vocab_size={config.vocab_size} exceeds the target's "
                                   f"{target.vocab_size} embedding rows: this draft was made for another target")
    check_layer_ids(config.target_layer_ids, field="target_layer_ids", num_layers=target.num_hidden_layers - 1,
                    source=source, error=DraftValidationError,
                    note=f"a target with {target.num_hidden_layers} layers; its last layer's output is not read")
