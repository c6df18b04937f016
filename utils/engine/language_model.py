"""Runs the exported MiniCPM-OCR language-model IRs with rollback, on OpenVINO Runtime and numpy only.

`LanguageModelSession` owns the text model's state between calls: preallocated K/V buffers of the
full-attention layers (sequence-major, so the past is a contiguous prefix that goes to OpenVINO without a
copy), and the conv and recurrent states of the linear-attention layers. A speculative step is
`verify(block)` (no commit), argmax on the host, then `accept(n)`, which keeps the state after the first n
tokens of the block: K/V and conv state are sliced from the block's outputs; the recurrent state is rebuilt
from the state before the block and the verify IR's rollback terms (`rebuild_recurrent_state`). The IR
layout and the derivation are in `utils.export.language_model`; file, port and config names in `utils.contract`.

Shape symbols:
    T: prompt tokens, S: block tokens, H: hidden size, V: vocabulary, n*H: concatenated target-layer hidden
    states, Hv/dk/dv: linear value heads/key dim/value dim.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openvino as ov

from utils.contract import (ATTENTION_MASK, HIDDEN_STATES, INPUTS_EMBEDS, LOGITS, POSITION_IDS, LanguageModelConfig,
                            LanguageModelVariant, past_conv_state, past_key, past_recurrent_state, past_value,
                            present_conv_window, present_key, present_recurrent_state, present_value, rollback_delta,
                            rollback_key, rollback_log_decay)
from utils.engine.device import openvino_core
from utils.engine.timing import Clock

__all__ = ["LanguageModelSession", "rebuild_recurrent_state"]


def rebuild_recurrent_state(initial_state: np.ndarray, keys: np.ndarray, deltas: np.ndarray,
                            log_decay: np.ndarray, count: int) -> np.ndarray:
    """The gated-delta recurrent state after the first `count` tokens of a block.

    S_n = exp(G_n) S_0 + sum_{t<=n} exp(G_n - G_t) k_t delta_t^T, exact because the update is linear in S.

    Args:
        initial_state: [1, Hv, dk, dv] state before the block.
        keys: [1, S, Hv, dk] normalised keys of the block (`rollback_key(i)`).
        deltas: [1, S, Hv, dv] per-token corrections (`rollback_delta(i)`).
        log_decay: [1, S, Hv] cumulative log decay (`rollback_log_decay(i)`).
        count: tokens to keep, 1 <= count <= S.

    Returns:
        [1, Hv, dk, dv] state.
    """
    if not 1 <= count <= keys.shape[1]:
        raise ValueError(f"count={count} must be in [1, {keys.shape[1]}]")
    cumulative = log_decay[0, :count]  # [n, Hv]
    weights = np.exp(cumulative[-1] - cumulative)  # [n, Hv]
    weighted_keys = (keys[0, :count] * weights[..., None]).transpose(1, 2, 0)  # [Hv, dk, n]
    update = weighted_keys @ deltas[0, :count].transpose(1, 0, 2)  # [Hv, dk, dv]
    return initial_state * np.exp(cumulative[-1])[None, :, None, None] + update[None]


def _timed_call(method):
    """Adds the duration of a public call to `call_clock` (what the session's host work is measured against)."""
    @functools.wraps(method)
    def timed(self, *args, **kwargs):
        with self.call_clock.measure():
            return method(self, *args, **kwargs)
    return timed


@dataclass(frozen=True)
class _Variant:
    compiled: ov.CompiledModel
    request: ov.InferRequest
    length: int
    rollback: bool
    dynamic: bool
    output_index: dict


class LanguageModelSession:
    """The exported text model with its state: prefill, decode, verify + accept (rollback), reset.

    Arrays returned by the public methods are copies owned by the caller.
    """

    def __init__(self, folder: Path | str, *, device: str = "CPU", properties: dict | None = None,
                 max_length: int = 8192, core: ov.Core | None = None):
        """Compiles each IR once and creates one infer request per IR.

        Args:
            folder: a folder written by `export_language_model`.
            device: OpenVINO device ("CPU", "GPU", "AUTO", ...).
            properties: compile properties (`utils.engine.device.compile_properties`; None: OpenVINO's
                defaults; parity needs {"INFERENCE_PRECISION_HINT": "f32"}, as this CPU otherwise runs bf16).
            max_length: tokens the K/V buffers hold.
            core: an `ov.Core` to share; the process's (`openvino_core()`) by default.
        """
        folder = Path(folder)
        config = LanguageModelConfig.read(folder)
        if max_length < 1:
            raise ValueError(f"max_length={max_length} must be >= 1")
        self.config = config
        self.max_length = max_length
        core = core or openvino_core()
        self._variants = {variant.name: self._compile(core, folder, variant, device, properties or {})
                          for variant in config.variants}
        self.verify_length = self._variants["verify"].length
        self.prefill_chunk = self._variants["prefill"].length
        self._allocate_state(core.read_model(folder / config.variant("decode").file))
        self.clock = Clock()  # inside OpenVINO inference calls
        self.call_clock = Clock()  # inside the public calls: inference plus the host work around it
        self.reset()

    @staticmethod
    def _compile(core, folder: Path, variant: LanguageModelVariant, device, properties) -> _Variant:
        compiled = core.compile_model(folder / variant.file, device, properties)
        output_index = {name: index for index, port in enumerate(compiled.outputs) for name in port.get_names()}
        return _Variant(compiled, compiled.create_infer_request(), variant.length, variant.rollback, variant.dynamic,
                        output_index)

    def _allocate_state(self, model: ov.Model) -> None:
        shapes = {port.get_any_name(): port.get_partial_shape() for port in model.inputs}
        self._kv_ports, self._linear_layers = [], []  # (past, present) port names of the K/V of full attention
        self._kv_buffers, self._linear_state = {}, {}
        for layer in range(len(self.config.layer_types)):
            if past_key(layer) in shapes:
                for past, present in ((past_key(layer), present_key(layer)), (past_value(layer), present_value(layer))):
                    heads, head_dim = shapes[past][2].get_length(), shapes[past][3].get_length()
                    self._kv_buffers[past] = np.zeros((1, self.max_length, heads, head_dim), np.float32)
                    self._kv_ports.append((past, present))
            elif past_conv_state(layer) in shapes:
                for name in (past_conv_state(layer), past_recurrent_state(layer)):
                    self._linear_state[name] = np.zeros(shapes[name].to_shape(), np.float32)
                self._linear_layers.append(layer)
        self._conv_width = {layer: self._linear_state[past_conv_state(layer)].shape[2]
                            for layer in self._linear_layers}

    @property
    def host_seconds(self) -> float:
        """Seconds of the public calls spent outside OpenVINO: input preparation, state slicing, rollback in numpy."""
        return self.call_clock.seconds - self.clock.seconds

    @property
    def past_length(self) -> int:
        """Tokens committed to the state."""
        return self._past_length

    @property
    def hidden_layer_ids(self) -> list[int]:
        """Decoder layers whose outputs make the returned hidden states, in order."""
        return list(self.config.hidden_layer_ids)

    @property
    def linear_attention_layers(self) -> list[int]:
        """Decoder layers with Gated DeltaNet (linear) attention, whose recurrent state `accept` rebuilds."""
        return list(self._linear_layers)

    def recurrent_state(self, layer: int) -> np.ndarray:
        """A copy of the committed recurrent state [1, Hv, dk, dv] of linear-attention layer `layer`."""
        name = past_recurrent_state(layer)
        if name not in self._linear_state:
            raise ValueError(f"layer {layer} has no linear attention; linear layers: {self._linear_layers}")
        return self._linear_state[name].copy()

    def reset(self) -> None:
        """Forgets the text: past length 0, zero linear-attention states, nothing pending."""
        self._past_length = 0
        for state in self._linear_state.values():
            state.fill(0.0)
        self._pending = None

    @_timed_call
    def prefill(self, inputs_embeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Appends a prompt of any length and commits it.

        From an empty state the first prefill chunk is left-padded (exact); after earlier text, the tokens
        that do not fill a chunk go through the verify IR, fully accepted.

        Args:
            inputs_embeds: [T, H] embeddings (image features already scattered in).

        Returns:
            logits [V] of the last token, hidden states [T, n*H].
        """
        embeds = self._start_call(inputs_embeds, "inputs_embeds")
        total, chunk = len(embeds), self.prefill_chunk
        remainder = total % chunk
        hidden, logits, offset = [], None, 0
        if remainder and self._past_length > 0:
            while offset < remainder:
                count = min(self.verify_length, remainder - offset)
                outputs = self._run("verify", embeds[offset:offset + count], pad_left=0)
                self._commit("verify", outputs, start=0, stop=count)
                hidden.append(outputs[HIDDEN_STATES][0, :count].copy())
                logits = outputs[LOGITS][0, count - 1].copy()
                offset += count
        elif remainder:
            outputs = self._run("prefill", embeds[:remainder], pad_left=chunk - remainder)
            self._commit("prefill", outputs, start=chunk - remainder, stop=chunk)
            hidden.append(outputs[HIDDEN_STATES][0, chunk - remainder:].copy())
            logits, offset = outputs[LOGITS][0, -1].copy(), remainder
        for offset in range(offset, total, chunk):
            outputs = self._run("prefill", embeds[offset:offset + chunk], pad_left=0)
            self._commit("prefill", outputs, start=0, stop=chunk)
            hidden.append(outputs[HIDDEN_STATES][0].copy())
            logits = outputs[LOGITS][0, -1].copy()
        return logits, np.concatenate(hidden)

    @_timed_call
    def decode_one(self, embeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Appends one token and commits it.

        Args:
            embeds: [H] or [1, H] embedding of the token.

        Returns:
            logits [V], hidden states [n*H].
        """
        embeds = self._start_call(np.reshape(embeds, (1, -1)), "embeds")
        outputs = self._run("decode", embeds, pad_left=0)
        self._commit("decode", outputs, start=0, stop=1)
        return outputs[LOGITS][0, 0].copy(), outputs[HIDDEN_STATES][0, 0].copy()

    @_timed_call
    def verify(self, block_embeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Runs a verification block (anchor + drafts) in one inference without committing it.

        A dynamic verify IR runs the block as it is, so verifying fewer drafts costs less; a static one
        right-pads shorter blocks (padded positions never reach the kept state).

        Args:
            block_embeds: [S, H] with 1 <= S <= verify_length.

        Returns:
            logits [S, V], hidden states [S, n*H]. Then call `accept(n)`.
        """
        embeds = self._start_call(block_embeds, "block_embeds")
        if len(embeds) > self.verify_length:
            raise ValueError(f"block_embeds has {len(embeds)} tokens; the verify IR takes at most "
                             f"{self.verify_length}")
        outputs = self._run("verify", embeds, pad_left=0)
        count = len(embeds)
        self._pending = (outputs, count)
        return outputs[LOGITS][0, :count].copy(), outputs[HIDDEN_STATES][0, :count].copy()

    @_timed_call
    def accept(self, n_tokens: int) -> None:
        """Commits the first `n_tokens` of the last verified block (0 keeps the state as it was)."""
        if self._pending is None:
            raise ValueError("accept() needs a verify() call first (each block is accepted at most once)")
        outputs, count = self._pending
        if not 0 <= n_tokens <= count:
            raise ValueError(f"n_tokens={n_tokens} must be in [0, {count}] (the verified block's length)")
        self._pending = None
        if n_tokens:
            self._commit("verify", outputs, start=0, stop=n_tokens)

    def _start_call(self, embeds: np.ndarray, field: str) -> np.ndarray:
        """Validates a call's embeddings [k, H] and discards any verified block not yet accepted."""
        embeds = np.asarray(embeds, dtype=np.float32)
        hidden_size = self.config.hidden_size
        if embeds.ndim != 2 or embeds.shape[1] != hidden_size or len(embeds) == 0:
            raise ValueError(f"{field} has shape {embeds.shape}; expected [tokens >= 1, {hidden_size}]")
        if self._past_length + len(embeds) > self.max_length:
            raise ValueError(f"{field}: {self._past_length} + {len(embeds)} tokens exceed max_length="
                             f"{self.max_length}")
        self._pending = None
        return embeds

    def _run(self, name: str, embeds: np.ndarray, *, pad_left: int) -> dict:
        """One inference of IR `name` on embeds [k, H] placed after `pad_left` pads, right-padded to its length
        (a dynamic IR takes the k tokens as they are: it costs what it computes)."""
        variant = self._variants[name]
        count = len(embeds)
        length = count if variant.dynamic else variant.length
        padded = np.zeros((1, length, embeds.shape[1]), np.float32)
        padded[0, pad_left:pad_left + count] = embeds
        mask = np.zeros((1, length), np.int64)
        mask[0, pad_left:pad_left + count] = 1
        positions = np.maximum(np.arange(length, dtype=np.int64) - pad_left, 0)[None] + self._past_length
        inputs = {INPUTS_EMBEDS: padded, POSITION_IDS: positions, ATTENTION_MASK: mask, **self._linear_state}
        for past, _ in self._kv_ports:
            inputs[past] = self._kv_buffers[past][:, :self._past_length]
        with self.clock.measure():
            results = variant.request.infer(inputs, share_inputs=True, share_outputs=True)
        return {port_name: results[index] for port_name, index in variant.output_index.items()}

    def _commit(self, name: str, outputs: dict, *, start: int, stop: int) -> None:
        """Keeps the state after positions [start, stop) of a call's block (positions before start are pads)."""
        variant, past_length = self._variants[name], self._past_length
        kept, call_length = stop - start, outputs[HIDDEN_STATES].shape[1]
        for past, present in self._kv_ports:
            self._kv_buffers[past][:, past_length:past_length + kept] = outputs[present][:, start:stop]
        for layer in self._linear_layers:
            width = self._conv_width[layer]
            window = outputs[present_conv_window(layer)]
            self._linear_state[past_conv_state(layer)][...] = window[:, :, stop:stop + width]
            state = self._linear_state[past_recurrent_state(layer)]
            if stop == call_length:
                state[...] = outputs[present_recurrent_state(layer)]
            elif variant.rollback and start == 0:
                state[...] = rebuild_recurrent_state(
                    state, outputs[rollback_key(layer)], outputs[rollback_delta(layer)],
                    outputs[rollback_log_decay(layer)], stop)
            else:
                raise ValueError(f"the {name} IR has no rollback outputs: it can only keep all {call_length} "
                                 f"tokens, not {kept}; export with rollback_outputs=True")
        self._past_length = past_length + kept
