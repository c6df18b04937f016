"""Runs the exported MiniCPM-OCR language-model IR with rollback, on OpenVINO Runtime and numpy only.

`LanguageModelSession` compiles the one IR (its token count is dynamic, so prompt chunks, single tokens and
verification blocks all run on one compiled model: the weights are in memory once; OpenVINO's CPU plugin
keeps a private copy of them per compiled model, even of one `ov.Model` compiled twice) and owns the text
model's state between calls: preallocated K/V buffers of the full-attention layers (sequence-major, so the
past is a contiguous prefix that goes to OpenVINO without a copy), and the conv and recurrent states of the
linear-attention layers. A speculative step is
`verify_greedy(block)` (no commit: the target's argmax at each position, read off OpenVINO's output buffer;
`verify` returns the logits themselves), then `accept(n)`, which keeps the state after the first n
tokens of the block: K/V and conv state are sliced from the block's outputs; the recurrent state is rebuilt
from the state before the block and the IR's rollback terms (`rebuild_recurrent_state`). The IR
layout and the derivation are in `utils.export.language_model`; file, port and config names in `utils.contract`.

Shape symbols:
    T: prompt tokens, S: block tokens, H: hidden size, V: vocabulary, n*H: concatenated target-layer hidden
    states, Hv/dk/dv: linear value heads/key dim/value dim.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import openvino as ov

from utils.contract import (ATTENTION_MASK, HIDDEN_STATES, INPUTS_EMBEDS, LANGUAGE_MODEL_NAME, LOGITS, NUM_LOGITS,
                            POSITION_IDS, LanguageModelConfig, past_conv_state, past_key, past_recurrent_state,
                            past_value, present_conv_window, present_key, present_recurrent_state, present_value,
                            rollback_delta, rollback_key, rollback_log_decay)
from utils.contract.core import openvino_core
from utils.engine.timing import Clock

__all__ = ["LanguageModelSession", "rebuild_recurrent_state"]


def rebuild_recurrent_state(initial_state: np.ndarray, keys: np.ndarray, deltas: np.ndarray,
                            log_decay: np.ndarray, count: int, *, out: np.ndarray | None = None) -> np.ndarray:
    """The gated-delta recurrent state after the first `count` tokens of a block.

    S_n = exp(G_n) S_0 + sum_{t<=n} exp(G_n - G_t) k_t delta_t^T, exact because the update is linear in S, with
    G_n - G_t = g_(t+1) + ... + g_n summed directly in float64 (never a difference of two running sums, which
    cancels: `utils.export.gated_delta`). The decay factors are then rounded to float32 and the state is updated
    in float32, as the graph does: float64 arrays of the state's size would cost twice the time for nothing.

    Args:
        initial_state: [1, Hv, dk, dv] state before the block.
        keys: [1, S, Hv, dk] normalised keys of the block (`rollback_key(i)`).
        deltas: [1, S, Hv, dv] per-token corrections (`rollback_delta(i)`).
        log_decay: [1, S, Hv] each token's log decay g_t (`rollback_log_decay(i)`).
        count: tokens to keep, 1 <= count <= S.
        out: where to write the state (may be `initial_state` itself); a new array by default.

    Returns:
        [1, Hv, dk, dv] float32 state (`out` when given).
    """
    if not 1 <= count <= keys.shape[1]:
        raise ValueError(f"count={count} must be in [1, {keys.shape[1]}]")
    decay = log_decay[0, :count].astype(np.float64)  # [n, Hv]
    after = np.cumsum(decay[::-1], axis=0)[::-1] - decay  # [n, Hv]: G_n - G_t, the decay after token t
    weighted_keys = keys[0, :count] * np.exp(after).astype(np.float32)[..., None]  # [n, Hv, dk]
    update = weighted_keys.transpose(1, 2, 0) @ deltas[0, :count].transpose(1, 0, 2)  # [Hv, dk, dv]
    total = np.exp(decay.sum(axis=0)).astype(np.float32)[None, :, None, None]
    out = np.multiply(initial_state, total, out=out, dtype=np.float32)
    out += update[None]
    return out


def _timed_call(method):
    """Adds the duration of a public call to `call_clock` (what the session's host work is measured against)."""
    @functools.wraps(method)
    def timed(self, *args, **kwargs):
        with self.call_clock.measure():
            return method(self, *args, **kwargs)
    return timed


class LanguageModelSession:
    """The exported text model with its state: prefill, decode, verify + accept (rollback), reset.

    Arrays returned by the public methods are copies owned by the caller.
    """

    def __init__(self, folder: Path | str, *, config: LanguageModelConfig | None = None, device: str = "CPU",
                 properties: dict | None = None, max_length: int = 8192, core: ov.Core | None = None):
        """Compiles the IR once and creates its infer request.

        Args:
            folder: a folder written by `export_language_model`.
            config: its `LANGUAGE_MODEL_CONFIG`, when the caller has read it (`utils.contract.target.ExportedTarget`).
            device: OpenVINO device ("CPU", "GPU", "AUTO", ...).
            properties: compile properties (`utils.engine.device.compile_properties`; None: OpenVINO's
                defaults; parity needs {"INFERENCE_PRECISION_HINT": "f32"}, as this CPU otherwise runs bf16).
            max_length: tokens the K/V buffers hold.
            core: an `ov.Core` to share; the process's (`openvino_core()`) by default.
        """
        folder = Path(folder)
        config = config or LanguageModelConfig.read(folder)
        if max_length < 1:
            raise ValueError(f"max_length={max_length} must be >= 1")
        self.config = config
        self.max_length = max_length
        self.verify_length = config.verify_length  # the most tokens `verify` takes
        self.prefill_chunk = config.prefill_chunk  # tokens per prefill call
        compiled = (core or openvino_core()).compile_model(folder / LANGUAGE_MODEL_NAME, device, properties or {})
        self._request = compiled.create_infer_request()
        self._output_index = {name: index for index, port in enumerate(compiled.outputs) for name in port.get_names()}
        self._allocate_state(compiled)
        self.clock = Clock()  # inside OpenVINO inference calls
        self.call_clock = Clock()  # inside the public calls: inference plus the host work around it
        self.reset()

    def _allocate_state(self, compiled: ov.CompiledModel) -> None:
        shapes = {port.get_any_name(): port.get_partial_shape() for port in compiled.inputs}
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

    def state_bytes(self, past_length: int) -> dict[str, int]:
        """Bytes of state a call reads after `past_length` committed tokens (for a roofline): {"kv_cache": the full
        attention layers' K/V, "linear_state": the linear attention layers' conv and recurrent states}."""
        return {"kv_cache": sum(buffer[:, :past_length].nbytes for buffer in self._kv_buffers.values()),
                "linear_state": sum(state.nbytes for state in self._linear_state.values())}

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
        return self._linear_state_copy(past_recurrent_state, layer)

    def conv_state(self, layer: int) -> np.ndarray:
        """A copy of the committed conv window [1, channels, kernel - 1] of linear-attention layer `layer`: the
        inputs of its last tokens, which the short causal convolution reads with the next ones."""
        return self._linear_state_copy(past_conv_state, layer)

    def _linear_state_copy(self, port_name, layer: int) -> np.ndarray:
        name = port_name(layer)
        if name not in self._linear_state:
            raise ValueError(f"layer {layer} has no linear attention; linear layers: {self._linear_layers}")
        return self._linear_state[name].copy()

    def key_cache(self, layer: int) -> np.ndarray:
        """A copy of the committed keys [1, past_length, heads, head_dim] of full-attention layer `layer`."""
        name = past_key(layer)
        if name not in self._kv_buffers:
            raise ValueError(f"layer {layer} has no full attention; linear layers: {self._linear_layers}")
        return self._kv_buffers[name][:, :self._past_length].copy()

    def verified_output(self, name: str) -> np.ndarray:
        """A copy of output `name` (a `utils.contract` port name) of the verified block not yet accepted.

        These are what `accept` keeps a prefix of: the block's K/V (`present_key(i)`) and the rollback terms of
        each linear-attention layer (`rollback_key(i)`, `rollback_delta(i)`, `rollback_log_decay(i)`), so a
        reader can redo the cut and the rollback by hand (notebook 07).
        """
        if self._pending is None:
            raise ValueError("verified_output() needs a verify() call not yet accepted")
        outputs, _ = self._pending
        if name not in outputs:
            raise ValueError(f"the language model has no output {name!r}")
        return np.array(outputs[name], copy=True)

    def reset(self) -> None:
        """Forgets the text: past length 0, zero linear-attention states, nothing pending."""
        self._past_length = 0
        for state in self._linear_state.values():
            state.fill(0.0)
        self._pending = None

    def snapshot(self) -> dict:
        """A copy of the committed text's state; `restore` returns to it (a benchmark prefills a context once)."""
        length = self._past_length
        return {"past_length": length,
                "kv": {name: buffer[:, :length].copy() for name, buffer in self._kv_buffers.items()},
                "linear": {name: state.copy() for name, state in self._linear_state.items()}}

    def restore(self, snapshot: dict) -> None:
        """Returns to a `snapshot` of this session; a verified block not yet accepted is dropped."""
        length = snapshot["past_length"]
        for name, buffer in self._kv_buffers.items():
            buffer[:, :length] = snapshot["kv"][name]
        for name, state in self._linear_state.items():
            state[...] = snapshot["linear"][name]
        self._past_length, self._pending = length, None

    @_timed_call
    def prefill(self, inputs_embeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Appends a prompt of any length, in calls of up to `prefill_chunk` tokens, and commits it.

        Args:
            inputs_embeds: [T, H] embeddings (image features already scattered in).

        Returns:
            logits [V] of the last token, hidden states [T, n*H].
        """
        embeds = self._start_call(inputs_embeds, "inputs_embeds")
        hidden = []
        for offset in range(0, len(embeds), self.prefill_chunk):
            chunk = embeds[offset:offset + self.prefill_chunk]
            last = offset + len(chunk) == len(embeds)
            outputs = self._run(chunk, num_logits=int(last))  # only the prompt's last token needs logits
            self._commit(outputs, len(chunk))
            hidden.append(outputs[HIDDEN_STATES][0].copy())
        return outputs[LOGITS][0, -1].copy(), np.concatenate(hidden)

    @_timed_call
    def decode_one(self, embeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Appends one token and commits it.

        Args:
            embeds: [H] or [1, H] embedding of the token.

        Returns:
            logits [V], hidden states [n*H].
        """
        embeds = self._start_call(np.reshape(embeds, (1, -1)), "embeds")
        outputs = self._run(embeds, num_logits=1)
        self._commit(outputs, 1)
        return outputs[LOGITS][0, 0].copy(), outputs[HIDDEN_STATES][0, 0].copy()

    @_timed_call
    def verify(self, block_embeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Runs a verification block (anchor + drafts) in one inference without committing it.

        The block runs as it is, so verifying fewer drafts costs less.

        Args:
            block_embeds: [S, H] with 1 <= S <= verify_length.

        Returns:
            logits [S, V], hidden states [S, n*H]. Then call `accept(n)`.
        """
        outputs = self._run_block(block_embeds)
        return outputs[LOGITS][0].copy(), outputs[HIDDEN_STATES][0].copy()

    @_timed_call
    def verify_greedy(self, block_embeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`verify`, returning the target's greedy token at each position instead of its logits: what a greedy
        decoder needs. The argmax reads OpenVINO's output buffer where it lies, so the [S, V] logits (16 MB at
        real size) are never copied.

        Returns:
            token ids [S] int64, hidden states [S, n*H]. Then call `accept(n)`.
        """
        outputs = self._run_block(block_embeds)
        return outputs[LOGITS][0].argmax(-1), outputs[HIDDEN_STATES][0].copy()

    def _run_block(self, block_embeds: np.ndarray) -> dict:
        embeds = self._start_call(block_embeds, "block_embeds")
        if len(embeds) > self.verify_length:
            raise ValueError(f"block_embeds has {len(embeds)} tokens; verify takes at most "
                             f"verify_length={self.verify_length}")
        outputs = self._run(embeds, num_logits=len(embeds))
        self._pending = (outputs, len(embeds))
        return outputs

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
            self._commit(outputs, n_tokens)

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

    def _run(self, embeds: np.ndarray, *, num_logits: int) -> dict:
        """One inference on embeds [k, H] after the committed text, with the logits of its last `num_logits`
        positions; returns the outputs by port name (views valid until the next inference)."""
        count = len(embeds)
        inputs = {INPUTS_EMBEDS: embeds[None], POSITION_IDS: np.arange(count, dtype=np.int64)[None] + self._past_length,
                  ATTENTION_MASK: np.ones((1, count), np.int64), NUM_LOGITS: np.array(num_logits, np.int64),
                  **self._linear_state}
        for past, _ in self._kv_ports:
            inputs[past] = self._kv_buffers[past][:, :self._past_length]
        with self.clock.measure():
            results = self._request.infer(inputs, share_inputs=True, share_outputs=True)
        return {port_name: results[index] for port_name, index in self._output_index.items()}

    def _commit(self, outputs: dict, kept: int) -> None:
        """Keeps the state after the first `kept` positions of a call's tokens."""
        past_length, call_length = self._past_length, outputs[HIDDEN_STATES].shape[1]
        for past, present in self._kv_ports:
            self._kv_buffers[past][:, past_length:past_length + kept] = outputs[present][:, :kept]
        for layer in self._linear_layers:
            width = self._conv_width[layer]
            window = outputs[present_conv_window(layer)]
            self._linear_state[past_conv_state(layer)][...] = window[:, :, kept:kept + width]
            state = self._linear_state[past_recurrent_state(layer)]
            if kept == call_length:
                state[...] = outputs[present_recurrent_state(layer)]
            else:
                rebuild_recurrent_state(state, outputs[rollback_key(layer)], outputs[rollback_delta(layer)],
                                        outputs[rollback_log_decay(layer)], kept, out=state)
        self._past_length = past_length + kept
