"""The exported DSpark draft on OpenVINO Runtime, with numpy in and out (no torch).

`DraftModel` runs the backbone IR block by block and keeps the draft's context keys/values on the host, in
preallocated buffers that grow by doubling (appending with `np.concatenate` would copy the whole cache at
every step). `MarkovHead` runs the Markov head IR: the left-to-right walk that turns block logits into
draft tokens in target ids, with the confidence of each. The IR layout, rt_info keys and why the walk
lives in the graph are documented in `utils.export.draft`; the names are defined here, so the runtime
never imports the exporter (which needs torch).

Shape symbols:
    N: new context positions, C: cached context positions, B: block size, H: hidden size,
    L: target layers read (len(target_layer_ids)), Vd: draft vocabulary, Hkv/D: KV heads/head dim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openvino as ov

from utils.runtime.clock import InferenceClock

__all__ = ["DRAFT_MODEL", "MARKOV_HEAD_MODEL", "RT_INFO_NAMESPACE", "RT_INFO_KEYS", "DraftInfo",
           "read_draft_info", "read_d2t", "ContextCache", "DraftModel", "MarkovHead"]

# IR file names, defined here (torch-free) and written by `utils.export.draft`.
DRAFT_MODEL = "openvino_model.xml"
MARKOV_HEAD_MODEL = "openvino_markov_head_model.xml"

RT_INFO_NAMESPACE = "dspark"  # every key below is stored as rt_info `dspark/<key>`, a string
RT_INFO_KEYS = ("draft_mode", "target_layer_ids", "mask_token_id", "block_size", "vocab_size", "draft_vocab_size",
                "markov_rank", "markov_head_type", "top_k", "confidence_head")


@dataclass(frozen=True)
class DraftInfo:
    """What a runtime needs to drive the draft, read from the IR's rt_info (see `utils.export.draft`)."""

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


def read_draft_info(model: ov.Model, *, source: str = "model") -> DraftInfo:
    """Reads the `dspark/*` rt_info of a draft or Markov head IR.

    Raises:
        ValueError: naming the first missing key.
    """
    values = {}
    for key in RT_INFO_KEYS:
        path = [RT_INFO_NAMESPACE, key]
        if not model.has_rt_info(path):
            raise ValueError(f"{source}: rt_info '{RT_INFO_NAMESPACE}/{key}' is missing; is this a DSpark draft IR?")
        values[key] = model.get_rt_info(path).astype(str)
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
    producer = model.output("d2t").get_node().input_value(0).get_node()
    if producer.get_type_name() != "Constant":
        raise ValueError(f"the 'd2t' output comes from a {producer.get_type_name()}, expected a Constant")
    return producer.get_data().astype(np.int64)


def _read(folder: Path | str, name: str) -> ov.Model:
    path = Path(folder) / name
    if not path.is_file():
        raise ValueError(f"{path} does not exist; export the draft first (python -m utils.export draft ...)")
    return ov.Core().read_model(path)


def _compile(model: ov.Model, device: str, properties: dict | None) -> ov.CompiledModel:
    return ov.Core().compile_model(model, device, properties or {})


class ContextCache:
    """The draft's context keys/values per layer, [1, C, Hkv, D] each, in host buffers that grow by doubling.

    Sequence-major, so the cached prefix `buffer[:, :C]` is one contiguous block that goes to OpenVINO
    without a copy.
    """

    def __init__(self, num_layers: int, *, kv_heads: int, head_dim: int, capacity: int = 256):
        self._shape = (kv_heads, head_dim)
        self._buffers = [np.zeros((1, capacity, kv_heads, head_dim), np.float32) for _ in range(2 * num_layers)]
        self.length = 0

    @property
    def capacity(self) -> int:
        """Positions the buffers hold before they next grow."""
        return self._buffers[0].shape[1]

    def views(self) -> list[np.ndarray]:
        """The cached keys and values, [1, C, Hkv, D] each, alternating key/value per layer (no copy)."""
        return [buffer[:, :self.length] for buffer in self._buffers]

    def append(self, new: list[np.ndarray]) -> None:
        """Appends [1, N, Hkv, D] keys/values, in the order of `views()`."""
        count = new[0].shape[1]
        if self.length + count > self.capacity:
            self._grow(self.length + count)
        for buffer, rows in zip(self._buffers, new, strict=True):
            buffer[:, self.length:self.length + count] = rows
        self.length += count

    def crop(self, length: int) -> None:
        """Keeps the first `length` context positions (after a rollback)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a context cache of {self.length} positions to {length}")
        self.length = length

    def _grow(self, needed: int) -> None:
        capacity = self.capacity
        while capacity < needed:
            capacity *= 2
        grown = []
        for buffer in self._buffers:
            bigger = np.zeros((1, capacity, *self._shape), np.float32)
            bigger[:, :self.length] = buffer[:, :self.length]
            grown.append(bigger)
        self._buffers = grown


class DraftModel:
    """The draft backbone IR with its context cache: one call per block, as `DSparkDraftModel.forward_block`."""

    def __init__(self, folder: Path | str, device: str = "CPU", *, properties: dict | None = None):
        """
        Args:
            folder: the exported draft folder (holds `DRAFT_MODEL`).
            device: an OpenVINO device name.
            properties: compile properties (`utils.runtime.device.compile_properties`; None: OpenVINO's defaults). Pass {} for the device's default precision.
        """
        model = _read(folder, DRAFT_MODEL)
        self.info = read_draft_info(model, source=str(Path(folder) / DRAFT_MODEL))
        self.d2t = read_d2t(model)
        self.target_ids = np.arange(self.d2t.size, dtype=np.int64) + self.d2t
        past = [port for port in model.inputs if port.get_any_name().startswith("past_key.")]
        kv_heads, head_dim = (dim.get_length() for dim in past[0].get_partial_shape()[2:])
        self.cache = ContextCache(len(past), kv_heads=kv_heads, head_dim=head_dim)
        self._past_names = [f"past_{kind}.{layer}" for layer in range(len(past)) for kind in ("key", "value")]
        self._present_names = [name.replace("past_", "present_") for name in self._past_names]
        self.clock = InferenceClock()
        self._request = _compile(model, device, properties).create_infer_request()

    @property
    def length(self) -> int:
        """Cached context positions C."""
        return self.cache.length

    def forward_block(self, block_embeds: np.ndarray, new_context: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Runs one block and appends the new context to the cache.

        Args:
            block_embeds: [1, B, H] target embeddings of `[anchor, mask, ..., mask]`.
            new_context: [1, N, L*H] concatenated target-layer outputs of the positions not yet cached; the
                block starts right after them (the anchor's position is C + N).

        Returns:
            (logits [B, Vd] over the draft vocabulary, final hidden states [B, H]).
        """
        if block_embeds.ndim != 3 or new_context.ndim != 3:
            raise ValueError(f"block_embeds {block_embeds.shape} and new_context {new_context.shape} must be "
                             f"[1, B, H] and [1, N, L*H]")
        start, total = self.cache.length, new_context.shape[1] + block_embeds.shape[1]
        inputs = {"inputs_embeds": np.ascontiguousarray(block_embeds, np.float32),
                  "hidden_states": np.ascontiguousarray(new_context, np.float32),
                  "position_ids": np.arange(start, start + total, dtype=np.int64)[None]}
        inputs |= dict(zip(self._past_names, self.cache.views()))
        with self.clock.measure():
            self._request.infer(inputs, share_inputs=True)
        output = self._request.get_tensor
        self.cache.append([output(name).data for name in self._present_names])
        return output("logits").data[0].copy(), output("last_hidden_state").data[0].copy()

    def crop(self, length: int) -> None:
        """Keeps the first `length` context positions."""
        self.cache.crop(length)


class MarkovHead:
    """The Markov head IR: the walk (Top-K scorer or dense) and the confidence head, in target ids."""

    def __init__(self, folder: Path | str, device: str = "CPU", *, properties: dict | None = None):
        """
        Args:
            folder: the exported draft folder (holds `MARKOV_HEAD_MODEL`).
            device: an OpenVINO device name.
            properties: compile properties (None: OpenVINO's defaults).
        """
        model = _read(folder, MARKOV_HEAD_MODEL)
        self.info = read_draft_info(model, source=str(Path(folder) / MARKOV_HEAD_MODEL))
        self.clock = InferenceClock()
        self._compiled = _compile(model, device, properties)

    def walk(self, logits: np.ndarray, hidden: np.ndarray, *, anchor: int, num_tokens: int,
             top_k: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """Chooses `num_tokens` draft tokens left to right, each conditioned on the previous one (the anchor first).

        Args:
            logits: [B, Vd] block logits from `DraftModel.forward_block`.
            hidden: [B, H] block hidden states (for the confidence head).
            anchor: target id of the block's anchor.
            num_tokens: tokens to propose, 1 <= num_tokens <= B.
            top_k: K of the candidate scorer; 0 selects the dense walk; None takes the exported default.

        Returns:
            (target ids [num_tokens] int64, confidences [num_tokens] float32, or None without a confidence head).
        """
        block_size = self.info.block_size
        if logits.shape != (block_size, self.info.draft_vocab_size):
            raise ValueError(f"logits have shape {logits.shape}, the Markov head takes [{block_size}, "
                             f"{self.info.draft_vocab_size}] (a whole block)")
        if not 1 <= num_tokens <= block_size:
            raise ValueError(f"num_tokens={num_tokens} must be in [1, {block_size}]")
        top_k = self.info.top_k if top_k is None else top_k
        if top_k < 0:
            raise ValueError(f"top_k={top_k} must be >= 0 (0 selects the dense walk)")
        inputs = {"logits": logits.astype(np.float32, copy=False), "anchor_token_id": np.array([anchor], np.int64),
                  "top_k": np.array(top_k, np.int64)}
        if self.info.confidence_head:
            inputs["last_hidden_state"] = hidden.astype(np.float32, copy=False)
        with self.clock.measure():
            result = self._compiled(inputs)
        token_ids = result["token_ids"][:num_tokens].copy()
        confidences = result["confidences"][:num_tokens].copy() if self.info.confidence_head else None
        return token_ids, confidences
