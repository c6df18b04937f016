"""The exported DSpark draft on OpenVINO Runtime, with numpy in and out (no torch).

The folder is read once by `utils.contract.draft.ExportedDraft`. `DraftModel` runs the backbone IR block by block
and keeps the draft's context keys/values on the host, in preallocated buffers the IR reads in place (appending
with `np.concatenate`, or a graph that concatenates, would copy the whole cache at every step). `MarkovHead`
runs the Markov head IR: the left-to-right walk that turns block logits into draft tokens in target ids, with the
confidence of each.
`DSparkProposer` puts the two together as the engine's `Proposer`. The IR layout, rt_info keys and why the walk
lives in the graph are documented in `utils.export.draft`; the names come from `utils.contract`, so the
runtime never imports the exporter (which needs torch).

Shape symbols:
    N: new context positions, C: cached context positions, B: block size, H: hidden size,
    L: target layers read (len(target_layer_ids)), Vd: draft vocabulary, Hkv/D: KV heads/head dim.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov

from utils.contract import (ANCHOR_TOKEN_ID, CONFIDENCES, HIDDEN_STATES, INPUTS_EMBEDS, LAST_HIDDEN_STATE, LOGITS,
                            POSITION_IDS, TOKEN_IDS, TOP_K, past_key, past_value, present_key, present_value)
from utils.contract.core import openvino_core
from utils.contract.draft import ExportedDraft
from utils.engine.proposal import Proposal
from utils.engine.timing import Clock, StageTimer

__all__ = ["PER_POSITION_ARGMAX", "ContextCache", "DraftModel", "MarkovHead", "DSparkProposer"]

# markov_head_top_k of the Top-1 scorer: each block position's best logit, which the Markov term cannot change. It is
# the draft without its Markov head (a DFlash draft's per-position argmax): `--markov-head off`.
PER_POSITION_ARGMAX = 1


def _compile(model: ov.Model, device: str, properties: dict | None) -> ov.CompiledModel:
    return openvino_core().compile_model(model, device, properties or {})


class ContextCache:
    """The draft's context keys/values per layer, head-major [1, Hkv, M, D] host buffers of M >= C positions.

    The backbone IR reads the whole buffer in place and masks positions from C on (`utils.export.draft`), so a
    call passes each buffer as it is: no copy, whatever the context. The buffers grow in steps of `GROWTH`
    positions (each growth copies them once), which bounds the masked positions a call computes for nothing.
    """

    GROWTH = 256

    def __init__(self, num_layers: int, *, kv_heads: int, head_dim: int):
        self._buffers = [np.zeros((1, kv_heads, self.GROWTH, head_dim), np.float32) for _ in range(2 * num_layers)]
        self.length = 0

    @property
    def capacity(self) -> int:
        """Positions M the buffers hold before they next grow."""
        return self._buffers[0].shape[2]

    def buffers(self) -> list[np.ndarray]:
        """The whole buffers, [1, Hkv, M, D] each, alternating key/value per layer; the first C positions hold
        the cache."""
        return self._buffers

    def views(self) -> list[np.ndarray]:
        """The cached keys and values, [1, Hkv, C, D] each (strided views, for inspection)."""
        return [buffer[:, :, :self.length] for buffer in self._buffers]

    def append(self, new: list[np.ndarray]) -> None:
        """Writes [1, Hkv, N, D] keys/values at position C, in the order of `buffers()`."""
        count = new[0].shape[2]
        if self.length + count > self.capacity:
            self._grow(self.length + count)
        for buffer, rows in zip(self._buffers, new, strict=True):
            buffer[:, :, self.length:self.length + count] = rows
        self.length += count

    def crop(self, length: int) -> None:
        """Keeps the first `length` context positions (after a rollback)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a context cache of {self.length} positions to {length}")
        self.length = length

    def _grow(self, needed: int) -> None:
        capacity = -(-needed // self.GROWTH) * self.GROWTH
        grown = []
        for buffer in self._buffers:
            bigger = np.zeros((*buffer.shape[:2], capacity, buffer.shape[3]), np.float32)
            bigger[:, :, :self.length] = buffer[:, :, :self.length]
            grown.append(bigger)
        self._buffers = grown


class DraftModel:
    """The draft backbone IR with its context cache: one call per block, as `DSparkDraftModel.forward_block`."""

    def __init__(self, draft: ExportedDraft | Path | str, device: str = "CPU", *, properties: dict | None = None):
        """
        Args:
            draft: the exported draft folder, or the `ExportedDraft` read from it.
            device: an OpenVINO device name.
            properties: compile properties (`utils.engine.device.compile_properties`; None or {}: OpenVINO's
                defaults, the device's own precision).
        """
        draft = ExportedDraft.of(draft)
        model, self.info = draft.draft_model, draft.info
        inputs = {port.get_any_name() for port in model.inputs}
        num_layers = sum(past_key(layer) in inputs for layer in range(len(inputs)))
        shape = model.input(past_key(0)).get_partial_shape()
        kv_heads, head_dim = shape[1].get_length(), shape[3].get_length()
        self.cache = ContextCache(num_layers, kv_heads=kv_heads, head_dim=head_dim)
        self._past_names = [name for layer in range(num_layers) for name in (past_key(layer), past_value(layer))]
        self._present_names = [name for layer in range(num_layers)
                               for name in (present_key(layer), present_value(layer))]
        self.clock = Clock()
        self.compiled = _compile(model, device, properties)
        self._request = self.compiled.create_infer_request()

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
        inputs = {INPUTS_EMBEDS: np.ascontiguousarray(block_embeds, np.float32),
                  HIDDEN_STATES: np.ascontiguousarray(new_context, np.float32),
                  POSITION_IDS: np.arange(start, start + total, dtype=np.int64)[None]}
        inputs |= dict(zip(self._past_names, self.cache.buffers()))
        with self.clock.measure():
            self._request.infer(inputs, share_inputs=True)
        output = self._request.get_tensor
        self.cache.append([output(name).data for name in self._present_names])
        return output(LOGITS).data[0].copy(), output(LAST_HIDDEN_STATE).data[0].copy()

    def crop(self, length: int) -> None:
        """Keeps the first `length` context positions."""
        self.cache.crop(length)


class MarkovHead:
    """The Markov head IR: the walk (Top-K scorer or dense) and the confidence head, in target ids."""

    def __init__(self, draft: ExportedDraft | Path | str, device: str = "CPU", *, properties: dict | None = None):
        """
        Args:
            draft: the exported draft folder, or the `ExportedDraft` read from it.
            device: an OpenVINO device name.
            properties: compile properties (None: OpenVINO's defaults).
        """
        draft = ExportedDraft.of(draft)
        self.info = draft.info
        self.clock = Clock()
        self._request = _compile(draft.markov_head, device, properties).create_infer_request()

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
        inputs = {LOGITS: np.ascontiguousarray(logits, np.float32), ANCHOR_TOKEN_ID: np.array([anchor], np.int64),
                  TOP_K: np.array(top_k, np.int64)}
        if self.info.confidence_head:
            inputs[LAST_HIDDEN_STATE] = np.ascontiguousarray(hidden, np.float32)
        with self.clock.measure():
            result = self._request.infer(inputs, share_inputs=True)  # the block logits are not copied again
        token_ids = result[TOKEN_IDS][:num_tokens].copy()
        confidences = result[CONFIDENCES][:num_tokens].copy() if self.info.confidence_head else None
        return token_ids, confidences


class DSparkProposer:
    """The exported DSpark draft: block forward, then the Markov head's walk (target ids and confidences).

    Args:
        draft: the draft backbone with its context cache.
        markov_head: the Markov head of the same draft folder.
        embed: the target's text embeddings (ids [1, S] -> [1, S, H]): the draft embeds its block with them.
        top_k: K of the Markov head's Top-K scorer; 0 selects the dense walk; None takes the exported default.
    """

    def __init__(self, draft: DraftModel, markov_head: MarkovHead, embed, *, top_k: int | None = None):
        self.draft, self.markov_head, self.embed, self.top_k = draft, markov_head, embed, top_k
        self.info = draft.info
        self.clocks = (draft.clock, markov_head.clock)

    @classmethod
    def load(cls, draft: ExportedDraft | Path | str, device: str, *, properties: dict, embed) -> DSparkProposer:
        """Compiles the draft folder written by `utils.export.export_draft`, read once (or its `ExportedDraft`),
        with compile properties from `utils.engine.device.compile_properties`."""
        draft = ExportedDraft.of(draft)
        return cls(DraftModel(draft, device, properties=properties),
                   MarkovHead(draft, device, properties=properties), embed)

    def with_top_k(self, top_k: int | None) -> DSparkProposer:
        """The same compiled draft with another Markov computation (shares the models and the context cache)."""
        return DSparkProposer(self.draft, self.markov_head, self.embed, top_k=top_k)

    def reset(self) -> None:
        self.draft.crop(0)

    def propose(self, anchor: int, context: np.ndarray, *, num_tokens: int, timer: StageTimer) -> Proposal:
        """Draft tokens (target ids) after `anchor`, given the target hidden states not yet seen [N, L*H]."""
        with timer.stage("draft"):
            block = np.array([[anchor] + [self.info.mask_token_id] * (self.info.block_size - 1)], np.int64)
            logits, hidden = self.draft.forward_block(self.embed(block), context[None])
        with timer.stage("markov_head"):
            drafts, confidences = self.markov_head.walk(logits, hidden, anchor=anchor, num_tokens=num_tokens,
                                                        top_k=self.top_k)
        return Proposal(tuple(drafts.tolist()), None if confidences is None else tuple(confidences.tolist()))
