"""MiniCPM-OCR's text model (Qwen3.5: Gated DeltaNet + gated attention) as one OpenVINO IR for speculative decoding.

The HF layers are re-run on their own weights by a wrapper with **explicit state inputs and outputs**, traced
once into **one IR whose token count S is dynamic**, 1 <= S <= `max_tokens` (the past length is dynamic
too), so the runtime compiles one model and holds its weights once, whatever it calls it for:

- a prompt, in chunks of up to `prefill_chunk` tokens, with `num_logits` 1 on the last chunk (0 before);
- one new token (S = 1, `num_logits` 1), when the target decodes alone;
- a verification block, anchor + drafts (S <= `verify_length`, `num_logits` S), then the rollback terms
  keep the state after any accepted prefix.

A traced Python loop would freeze S; the gated delta rule is written so that it does not
(`utils.export.gated_delta`: the chunk loop is unrolled up to `max_tokens` and the unused chunks are empty
tensors). Why one IR: OpenVINO's CPU plugin keeps a private copy of the weights per compiled model (even for
one `ov.Model` compiled twice), so the earlier layout of one IR per call kind (static prefill chunk, static
single token, dynamic verification) held them three times. At real size with random weights (int8, f32 hint,
1k context, 2 shared cores) the peak resident memory of compiling and calling them went from 5.6 to 2.7 GB
(fp32: 15.7 to 6.9 GB); a verification of 16 tokens and a prompt chunk of 128 cost the same within noise
(+0-5%), a single token about a third more (~52 -> ~70-77 ms), as every node of the graph now has a dynamic
S. `benchmarks.language_model_latency` measures this IR.

Inputs (`{i}` is the decoder layer index; every name is defined in `utils.contract`):
    inputs_embeds [1, S, H] f32; position_ids [1, S] i64; attention_mask [1, S] i64 (1 = token, 0 = pad:
    a pad is exact, as masked positions are zeroed at the input of every linear-attention layer, as HF does,
    and their keys are masked; the runtime needs none, since S is dynamic); num_logits [] i64 (logits of the
    last num_logits positions, 0 <= num_logits <= S);
    full attention: past_key.{i}, past_value.{i} [1, P, Hkv, D] (sequence-major, so a prefix of a
    preallocated buffer is one contiguous block); linear attention: past_conv_state.{i} [1, C, W-1],
    past_recurrent_state.{i} [1, Hv, dk, dv].
Outputs:
    logits [1, num_logits, V]; hidden_states [1, S, n*H] = outputs of the decoder layers `hidden_layer_ids`
    (HF `hidden_states[i + 1]`) concatenated in that order; present_key.{i}, present_value.{i}
    [1, S, Hkv, D] (the block's K/V only); present_conv_window.{i} [1, C, W-1+S] (conv state followed by
    the block's conv inputs); present_recurrent_state.{i} [1, Hv, dk, dv] (after all S tokens);
    rollback_key.{i} [1, S, Hv, dk], rollback_delta.{i} [1, S, Hv, dv], rollback_log_decay.{i} [1, S, Hv]
    (each token's log decay g_t; the host sums them in float64: a running sum G_t computed in the graph at bf16
    is 1 to 2 apart after 16 tokens of strong decay, and exp(G_n - G_t) would carry that error).

Rollback to the first n tokens of a block, without re-running them:
    K/V: keep present_key/value[:, :n]. Conv state: present_conv_window[:, :, n : n + W - 1].
    Recurrent state: the gated delta rule is linear in the state, so from the state S_0 before the block,
    S_n = exp(G_n) S_0 + sum_{t<=n} exp(G_n - G_t) k_t delta_t^T
    (numpy, the runtime's `rebuild_recurrent_state`). This costs a few small outputs per
    layer instead of S full states (about 300 MB per verify step at real size).

rt_info `hidden_states_decoder_layers` (the key optimum-intel writes for DFlash/Eagle-3 targets):
    JSON {"layers": {"<layer id>": {"producer": <node friendly name>, "output_index": <int>}}} for every
    decoder layer, pointing at the node whose output is that layer's output (the residual sum after the
    MLP), so OpenVINO GenAI can find the tensors without extra outputs.

Shape symbols:
    S: tokens per call, P: past length, H: hidden size, V: vocabulary, Hkv/D: KV heads/head dim,
    C: conv channels (2 * key dim + value dim), W: conv kernel, Hv/dk/dv: linear value heads/key/value dim.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from utils.checkpoint.config import check_layer_ids
from utils.contract import (ATTENTION_MASK, DEFAULT_PREFILL_CHUNK, HIDDEN_STATES, HIDDEN_STATES_RT_INFO_KEY,
                            INPUTS_EMBEDS, LANGUAGE_MODEL_NAME, LOGITS, NUM_LOGITS, POSITION_IDS, WEIGHT_FORMATS,
                            LanguageModelConfig, past_conv_state, past_key, past_recurrent_state, past_value,
                            present_conv_window, present_key, present_recurrent_state, present_value, rollback_delta,
                            rollback_key, rollback_log_decay)
from utils.export.compression import save_ir
from utils.export.gated_delta import DEFAULT_CHUNK_SIZE, chunk_gated_delta_rule

__all__ = [
    "TextModelWithState",
    "convert_language_model",
    "export_language_model",
]


def _text_parts(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """(Qwen3.5 text model, lm_head) of a MiniCPMOcrForConditionalGeneration or a Qwen3.5 causal LM."""
    inner = getattr(model, "model", None)
    lm_head = getattr(model, "lm_head", None)
    language_model = getattr(inner, "language_model", inner)
    if lm_head is None or not hasattr(language_model, "layers"):
        raise ValueError(f"{type(model).__name__} has no text model with `layers` and `lm_head`; pass a "
                         f"MiniCPMOcrForConditionalGeneration or a Qwen3.5 causal LM")
    return language_model, lm_head


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim, as HF `l2norm` (and the FLA kernels) compute it."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Rotates half the hidden dims of the input."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _apply_partial_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on the first cos.shape[-1] dims of x [1, S, heads, D]; cos/sin [1, S, 1, rotary dims]."""
    rotary = cos.shape[-1]
    rotated, passed = x[..., :rotary], x[..., rotary:]
    return torch.cat((rotated * cos + _rotate_half(rotated) * sin, passed), dim=-1)


class _GatedAttentionWithCache(nn.Module):
    """Qwen3.5 gated full attention on HF weights, with past K/V in and the block's K/V out.

    Grouped-query attention by broadcasting ([1, Hkv, groups, S, D] @ [1, Hkv, 1, P+S, D]^T), not repeat_kv.
    """

    def __init__(self, attention: nn.Module, config):
        super().__init__()
        self.attention = attention
        self.head_dim = attention.head_dim
        self.num_kv_heads = config.num_key_value_heads
        self.groups = config.num_attention_heads // config.num_key_value_heads

    def forward(self, hidden, cos, sin, mask_bias, past_key, past_value):
        attention, head_dim = self.attention, self.head_dim  # S may be dynamic: no shape arithmetic on it
        query, gate = torch.chunk(attention.q_proj(hidden).unflatten(-1, (-1, 2 * head_dim)), 2, dim=-1)
        query = _apply_partial_rotary(attention.q_norm(query), cos, sin)
        key = attention.k_norm(attention.k_proj(hidden).unflatten(-1, (self.num_kv_heads, head_dim)))
        key = _apply_partial_rotary(key, cos, sin)
        value = attention.v_proj(hidden).unflatten(-1, (self.num_kv_heads, head_dim))

        keys = torch.cat((past_key, key), dim=1).transpose(1, 2).unsqueeze(2)  # [1, Hkv, 1, P+S, D]
        values = torch.cat((past_value, value), dim=1).transpose(1, 2).unsqueeze(2)  # [1, Hkv, 1, P+S, D]
        grouped = query.unflatten(2, (self.num_kv_heads, self.groups)).permute(0, 2, 3, 1, 4)
        # keys stay rows [P+S, D] and the matmul takes them transposed: a [D, P+S] copy moves single floats, and
        # cost a single-token call at 3k context 19% of its time (docs/performance.md)
        scores = (grouped @ keys.transpose(-1, -2)) * attention.scaling + mask_bias  # [1, Hkv, groups, S, P+S]
        context = torch.softmax(scores, dim=-1) @ values  # [1, Hkv, groups, S, D]
        context = context.permute(0, 3, 1, 2, 4).flatten(2)
        output = attention.o_proj(context * torch.sigmoid(gate.flatten(2)))
        return output, key, value


class _GatedDeltaNetWithState(nn.Module):
    """Qwen3.5 Gated DeltaNet on HF weights, with conv and recurrent state in and out."""

    def __init__(self, linear_attention: nn.Module, *, max_tokens: int, chunk_size: int):
        super().__init__()
        self.linear = linear_attention
        self.max_tokens, self.chunk_size = max_tokens, chunk_size

    def forward(self, hidden, token_mask, conv_state, recurrent_state):
        linear = self.linear
        heads_k, heads_v = linear.num_k_heads, linear.num_v_heads
        dim_k, dim_v = linear.head_k_dim, linear.head_v_dim
        hidden = hidden * token_mask.unsqueeze(-1)

        conv_window = torch.cat((conv_state, linear.in_proj_qkv(hidden).transpose(1, 2)), dim=-1)
        mixed = F.silu(F.conv1d(conv_window, linear.conv1d.weight, linear.conv1d.bias, groups=linear.conv_dim))
        query, key, value = torch.split(mixed.transpose(1, 2), [linear.key_dim, linear.key_dim, linear.value_dim],
                                        dim=-1)
        query = self._per_value_head(_l2norm(query.unflatten(-1, (heads_k, dim_k))), heads_v) * dim_k ** -0.5
        key = self._per_value_head(_l2norm(key.unflatten(-1, (heads_k, dim_k))), heads_v)
        value = value.unflatten(-1, (heads_v, dim_v))
        beta = torch.sigmoid(linear.in_proj_b(hidden))
        log_decay = -linear.A_log.float().exp() * F.softplus(linear.in_proj_a(hidden) + linear.dt_bias)

        output, new_state, delta = chunk_gated_delta_rule(
            query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), log_decay.transpose(1, 2),
            beta.transpose(1, 2), recurrent_state, max_length=self.max_tokens, chunk_size=self.chunk_size)
        gate = linear.in_proj_z(hidden).reshape(-1, dim_v)
        output = linear.norm(output.transpose(1, 2).reshape(-1, dim_v), gate).reshape(1, -1, heads_v * dim_v)
        rollback = (key, delta.transpose(1, 2), log_decay)
        return linear.out_proj(output), conv_window, new_state, rollback

    @staticmethod
    def _per_value_head(x: torch.Tensor, heads_v: int) -> torch.Tensor:
        """[1, S, Hk, d] -> [1, S, Hv, d], each key head serving Hv/Hk consecutive value heads."""
        return x.repeat_interleave(heads_v // x.shape[2], dim=2)


class TextModelWithState(nn.Module):
    """The Qwen3.5 text model + lm_head with explicit state, for calls of 1 to `max_tokens` tokens (one IR).

    forward(inputs_embeds, position_ids, attention_mask, num_logits, *states) with states in layer order (full:
    past_key, past_value; linear: past_conv_state, past_recurrent_state) returns (logits, hidden_states,
    *state and rollback outputs in layer order[, *every decoder layer's output when `annotate`]). Layout:
    module docstring.
    """

    def __init__(self, model: nn.Module, *, hidden_layer_ids: list[int], max_tokens: int,
                 chunk_size: int = DEFAULT_CHUNK_SIZE, annotate: bool = False):
        super().__init__()
        language_model, self.lm_head = _text_parts(model)
        self.config = language_model.config
        self.layers = language_model.layers
        self.norm = language_model.norm
        rotary = language_model.rotary_emb
        self.register_buffer("inv_freq", rotary.inv_freq.detach().clone().float(), persistent=False)
        self.rotary_scaling = float(rotary.attention_scaling)
        self.layer_types = list(self.config.layer_types)
        self.mixers = nn.ModuleList(
            _GatedAttentionWithCache(layer.self_attn, self.config) if kind == "full_attention"
            else _GatedDeltaNetWithState(layer.linear_attn, max_tokens=max_tokens, chunk_size=chunk_size)
            for layer, kind in zip(self.layers, self.layer_types)
        )
        self.hidden_layer_ids = list(hidden_layer_ids)
        self.max_tokens = max_tokens
        self.annotate = annotate

    def _rotary(self, position_ids):
        """cos, sin [1, S, 1, rotary dims]: text positions are 1-D, so the mrope sections coincide."""
        frequencies = position_ids[..., None].float() * self.inv_freq
        angles = torch.cat((frequencies, frequencies), dim=-1).unsqueeze(2)
        return angles.cos() * self.rotary_scaling, angles.sin() * self.rotary_scaling

    def _mask_bias(self, attention_mask, past_length_like):
        """Additive mask [S, P+S]: all past, causal in the block, masked keys hidden (a query always sees itself)."""
        index = torch.cumsum(torch.ones_like(attention_mask[0]), dim=0)  # 1..S, without shape arithmetic
        causal, itself = index[None, :] <= index[:, None], index[None, :] == index[:, None]
        visible = causal & ((attention_mask[0] > 0).unsqueeze(0) | itself)
        block = torch.where(visible, 0.0, torch.finfo(torch.float32).min)
        past = torch.zeros(block.shape[0], past_length_like.shape[1])  # [S, P]: traced sizes, both may be dynamic
        return torch.cat((past, block), dim=1)

    @staticmethod
    def _last_positions(hidden, num_logits):
        """hidden [1, S, H] -> [1, num_logits, H], the last positions (a dynamic count: no slicing by a tensor)."""
        index = torch.cumsum(torch.ones_like(hidden[0, :, 0], dtype=torch.int64), dim=0)  # 1..S
        return hidden[:, index > index[-1] - num_logits]

    def forward(self, inputs_embeds, position_ids, attention_mask, num_logits, *states):
        cos, sin = self._rotary(position_ids)
        token_mask = attention_mask.to(inputs_embeds.dtype)
        mask_bias = None
        hidden = inputs_embeds
        layer_outputs, state_outputs = [], []
        for index, (layer, mixer, kind) in enumerate(zip(self.layers, self.mixers, self.layer_types)):
            first_state, second_state = states[2 * index], states[2 * index + 1]
            normed = layer.input_layernorm(hidden)
            if kind == "full_attention":
                if mask_bias is None:
                    mask_bias = self._mask_bias(attention_mask, first_state)
                mixed, key, value = mixer(normed, cos, sin, mask_bias, first_state, second_state)
                state_outputs += [key, value]
            else:
                mixed, conv_window, new_state, rollback = mixer(normed, token_mask, first_state, second_state)
                state_outputs += [conv_window, new_state, *rollback]
            hidden = hidden + mixed
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
            layer_outputs.append(hidden)

        logits = self.lm_head(self.norm(self._last_positions(hidden, num_logits)))
        selected = torch.cat([layer_outputs[i] for i in self.hidden_layer_ids], dim=-1)
        return (logits, selected, *state_outputs, *(layer_outputs if self.annotate else ()))

    def state_specs(self) -> list[tuple[str, list[int]]]:
        """(input name, shape with -1 for the dynamic past length) per state input, in forward order."""
        specs = []
        for index, (mixer, kind) in enumerate(zip(self.mixers, self.layer_types)):
            if kind == "full_attention":
                shape = [1, -1, mixer.num_kv_heads, mixer.head_dim]
                specs += [(past_key(index), shape), (past_value(index), shape)]
            else:
                linear = mixer.linear
                specs += [(past_conv_state(index), [1, linear.conv_dim, linear.conv_kernel_size - 1]),
                          (past_recurrent_state(index), [1, linear.num_v_heads, linear.head_k_dim, linear.head_v_dim])]
        return specs

    def output_names(self) -> list[str]:
        """Names of the outputs, in forward order (without the annotation outputs)."""
        names = [LOGITS, HIDDEN_STATES]
        for index, kind in enumerate(self.layer_types):
            if kind == "full_attention":
                names += [present_key(index), present_value(index)]
            else:
                names += [present_conv_window(index), present_recurrent_state(index),
                          rollback_key(index), rollback_delta(index), rollback_log_decay(index)]
        return names


def _example_inputs(wrapper: TextModelWithState, *, length: int, past_length: int) -> tuple[torch.Tensor, ...]:
    states = [torch.zeros([past_length if size == -1 else size for size in shape])
              for _, shape in wrapper.state_specs()]
    return (torch.zeros(1, length, wrapper.config.hidden_size), torch.arange(length)[None] + past_length,
            torch.ones(1, length, dtype=torch.int64), torch.tensor(length), *states)


def _annotate_decoder_layers(ov_model, num_layers: int) -> dict:
    """Removes the trailing per-layer outputs and returns the `hidden_states_decoder_layers` locators."""
    results = ov_model.get_results()[-num_layers:]
    layers = {}
    for layer_id, result in enumerate(results):
        producer = result.input_value(0)
        node = producer.get_node()
        node.set_friendly_name(f"decoder_layer.{layer_id}.output")
        layers[str(layer_id)] = {"producer": node.get_friendly_name(), "output_index": producer.get_index()}
        ov_model.remove_result(result)
    return {"layers": layers}


def convert_language_model(model: nn.Module, *, max_tokens: int, hidden_layer_ids: list[int],
                           chunk_size: int = DEFAULT_CHUNK_SIZE):
    """Converts the text model to an in-memory `ov.Model` of dynamic S (1..max_tokens) with named ports and rt_info.

    Args:
        model: a loaded MiniCPMOcrForConditionalGeneration (or Qwen3.5 causal LM), eval mode.
        max_tokens: the most tokens one call may have.
        hidden_layer_ids: decoder layers whose outputs make `hidden_states`, in that order.
        chunk_size: tokens per chunk of the gated delta rule inside the graph.

    Returns:
        The `ov.Model`.
    """
    import openvino as ov

    if max_tokens < 1:
        raise ValueError(f"max_tokens={max_tokens} must be >= 1")
    wrapper = TextModelWithState(model, hidden_layer_ids=hidden_layer_ids, max_tokens=max_tokens,
                                 chunk_size=chunk_size, annotate=True).eval()
    example = _example_inputs(wrapper, length=max_tokens, past_length=3)
    shapes = [[1, -1, wrapper.config.hidden_size], [1, -1], [1, -1], []]
    shapes += [shape for _, shape in wrapper.state_specs()]
    types = [ov.Type.f32, ov.Type.i64, ov.Type.i64, ov.Type.i64] + [ov.Type.f32] * len(wrapper.state_specs())
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # the sizes the trace sees stay dynamic in the IR
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.trace is what ov.convert_model uses
        ov_model = ov.convert_model(wrapper, example_input=example,
                                    input=[(ov.PartialShape(shape), tensor_type)
                                           for shape, tensor_type in zip(shapes, types)])
    annotation = _annotate_decoder_layers(ov_model, len(wrapper.layers))
    input_names = [INPUTS_EMBEDS, POSITION_IDS, ATTENTION_MASK, NUM_LOGITS]
    input_names += [name for name, _ in wrapper.state_specs()]
    for port, name in zip(ov_model.inputs, input_names):
        port.get_tensor().set_names({name})
    for port, name in zip(ov_model.outputs, wrapper.output_names()):
        port.get_tensor().set_names({name})
    ov_model.set_rt_info(json.dumps(annotation, separators=(",", ":")), HIDDEN_STATES_RT_INFO_KEY)
    return ov_model


def export_language_model(
    model: nn.Module,
    out_dir: Path | str,
    *,
    hidden_layer_ids: list[int],
    verify_length: int,
    prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
    weight_format: str = "fp32",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> dict:
    """Writes the language-model IR (`LANGUAGE_MODEL_NAME`) and its `LanguageModelConfig` into `out_dir`.

    The IR takes up to max(`verify_length`, `prefill_chunk`) tokens per call. `out_dir` must exist (the caller
    makes the folder atomic, e.g. with `utils.files.atomic_directory`).

    Args:
        model: a loaded MiniCPMOcrForConditionalGeneration (or Qwen3.5 causal LM); sizes come from its config.
        out_dir: an existing folder.
        hidden_layer_ids: the draft's target layer ids (`DSparkConfig.from_folder(draft).target_layer_ids`).
        verify_length: the most tokens of a verification: anchor + draft tokens (a DSpark draft: block_size + 1).
        prefill_chunk: the most tokens of a prefill call.
        weight_format: "fp32", "fp16" (stored in fp16), "int8" or "int4" (compressed in memory: `save_ir`).
        chunk_size: tokens per chunk of the gated delta rule inside the graph.

    Returns:
        The config as written (`LanguageModelConfig.to_json`), plus `export_seconds`.
    """
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise ValueError(f"out_dir={out_dir} is not an existing folder")
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format={weight_format!r} must be one of {WEIGHT_FORMATS}")
    language_model, _ = _text_parts(model)
    config = language_model.config
    layer_ids = check_layer_ids(hidden_layer_ids, field="hidden_layer_ids", num_layers=config.num_hidden_layers)
    description = LanguageModelConfig(weight_format=weight_format, hidden_size=config.hidden_size,
                                      vocab_size=config.vocab_size, hidden_layer_ids=layer_ids,
                                      layer_types=tuple(config.layer_types), verify_length=verify_length,
                                      prefill_chunk=prefill_chunk)
    start = time.perf_counter()
    ov_model = convert_language_model(model, max_tokens=description.max_tokens, hidden_layer_ids=list(layer_ids),
                                      chunk_size=chunk_size)
    save_ir(ov_model, out_dir / LANGUAGE_MODEL_NAME, weight_format=weight_format)
    description.write(out_dir)
    return {**description.to_json(), "export_seconds": round(time.perf_counter() - start, 2)}
