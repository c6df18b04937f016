"""The pruned DSpark draft -> OpenVINO IR, laid out as optimum-intel #2099 exports it.

`export_draft(SRC, OUT)` (or `python -m utils.export draft --model SRC --out OUT`) validates SRC with the
reference loader, then writes, atomically (a temporary folder moved into place when complete):

`DRAFT_MODEL` (openvino_model.xml), the backbone: one call per block, context cache as explicit state.
    Inputs:
        inputs_embeds     f32 [1, B, H]        target embeddings of `[anchor, mask, ..., mask]`
        hidden_states     f32 [1, N, L*H]      new context: the target-layer outputs not yet cached
        position_ids      i64 [1, N + B]       absolute positions of the new context, then of the block
        past_key.{i}      f32 [1, Hkv, M, D]   context keys of draft layer i (normed, rotated) in a buffer of M >= C
                                               positions; the first C = position_ids[0, 0] are the cache
        past_value.{i}    f32 [1, Hkv, M, D]   context values of draft layer i, likewise
    Outputs:
        logits            f32 [1, B, Vd]       over the draft vocabulary
        d2t               i64 [Vd]             constant, delta-encoded: draft token j is target token j + d2t[j]
        last_hidden_state f32 [1, B, H]        after the final `norm`, for the Markov and confidence heads
        present_key.{i}   f32 [1, Hkv, N, D]   keys of the new context only; the runtime writes them at C
        present_value.{i} f32 [1, Hkv, N, D]
    B, N and M are dynamic (N may be 0, M >= 1). The cache is read where it lies: a runtime keeps K/V head-major
    in preallocated buffers and passes the whole buffer, whose positions from C on the attention masks out, so no
    call copies the cache (the runtime's `ContextCache`). Inside, the block's attention is split in two: the
    scores over the buffer (a matmul that takes each head's cached keys as rows) and over the new context and the
    block, joined by one softmax written out (a shared maximum and sum), so neither the cache nor its scores are
    concatenated with anything, and grouped-query heads share their K/V head by a reshape of the queries, not by
    repeating K/V. Up to draft IR format 1 the graph transposed, concatenated and repeated the whole cache at
    each call.

`MARKOV_HEAD_MODEL` (openvino_markov_head_model.xml), both Markov computations and the confidence head,
    built op by op (`utils.export.markov_head`):
    Inputs:  logits f32 [B, Vd]; anchor_token_id i64 [1]; top_k i64 [] (0: dense walk, else the Top-K
             candidate scorer with K = min(top_k, Vd)); last_hidden_state f32 [B, H] (with a confidence head).
    Outputs: token_ids i64 [B], the walk's tokens in target ids; confidences f32 [B] (with a confidence head).
    B is static (the walk is unrolled over the block); a runtime proposing fewer tokens takes a prefix.

rt_info of both IRs, strings under `dspark/`:
    draft_mode        "dspark"
    target_layer_ids  JSON list: target decoder layers (HF `hidden_states[i + 1]`) concatenated, in order, into
                      `hidden_states`
    mask_token_id     target id that fills the block after the anchor
    block_size        B, positions per block (the anchor included); draft tokens per block
    vocab_size        input vocabulary: what anchor, mask and previous-token ids index
    draft_vocab_size  Vd, the pruned vocabulary `logits` cover
    markov_rank       r of the vanilla Markov head (`markov_w1` [V, r], `markov_w2` [Vd, r])
    markov_head_type  "vanilla"
    top_k             default K of the Top-K candidate scorer, min(64, Vd); 0 at run time selects the dense walk
    confidence_head   "true"/"false": whether the Markov head IR has `last_hidden_state` and `confidences`

Beside them: `config.json` and `local-to-target.json` of the source (absolute target ids: ground truth for d2t).

Weights: fp32 (the reference), fp16, or NNCF INT8/INT4 (`utils.export.compression`; under INT4 the `lm_head`
and the Markov tables stay INT8), recorded as rt_info `dspark/weight_format` when compressed.

Shape symbols:
    N: new context positions, C: cached context positions, B: block size, H: hidden size,
    L: target layers read, Vd: draft vocabulary, V: input vocabulary, Hkv/D: KV heads/head dim.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from utils.checkpoint.config import DRAFT_CONFIG, DraftValidationError
from utils.checkpoint.draft import LOCAL_TO_TARGET, DraftCheckpoint, load_draft_checkpoint
from utils.contract import (D2T, DRAFT_MODEL, HIDDEN_STATES, INPUTS_EMBEDS, LAST_HIDDEN_STATE, LOGITS,
                            MARKOV_HEAD_MODEL, POSITION_IDS, WEIGHT_FORMATS, DraftInfo, past_key, past_value,
                            present_key, present_value, write_draft_info)
from utils.export.compression import save_ir
from utils.export.markov_head import MarkovHeadWeights, build_markov_head
from utils.files import atomic_directory
from utils.reference.modeling import DSparkAttention, DSparkDraftModel, rope_cos_sin

__all__ = ["DraftBackboneWithCache", "draft_info", "convert_backbone", "convert_markov_head", "export_draft"]


def _attend_in_place(attention: DSparkAttention, block: torch.Tensor, cached: torch.Tensor,
                     past: tuple[torch.Tensor, torch.Tensor], new: tuple[torch.Tensor, torch.Tensor],
                     block_rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """`DSparkAttention.forward` over a cache buffer read in place (see the module docstring).

    Args:
        block: [1, B, H] normed block.
        cached: [1] the cached positions C; buffer positions from C on are masked out.
        past: keys and values [1, Hkv, M, D], the cache buffer.
        new: keys and values [1, Hkv, N, D] of the new context.
        block_rope: cos/sin of the block's positions.
    """
    config = attention.config
    heads, kv_heads, head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    cos, sin = block_rope
    queries = attention.project_queries(block, cos, sin)
    block_len = block.shape[1]
    # query head h reads K/V head h // groups: [1, Hq, B, D] -> [1, Hkv, groups * B, D] is a reshape, not a copy
    grouped = queries.reshape(1, kv_heads, (heads // kv_heads) * block_len, head_dim) * head_dim ** -0.5
    block_keys, block_values = attention.project_kv(block, cos, sin)
    new_keys, new_values = torch.cat((new[0], block_keys), dim=2), torch.cat((new[1], block_values), dim=2)
    past_scores = grouped @ past[0].transpose(-1, -2)  # [1, Hkv, groups * B, M]
    in_cache = torch.arange(past[0].shape[2]) < cached
    past_scores = past_scores.masked_fill(~in_cache, float("-inf"))
    new_scores = grouped @ new_keys.transpose(-1, -2)  # [1, Hkv, groups * B, N + B]
    top = torch.maximum(past_scores.amax(-1, keepdim=True), new_scores.amax(-1, keepdim=True))
    past_weights, new_weights = torch.exp(past_scores - top), torch.exp(new_scores - top)
    total = past_weights.sum(-1, keepdim=True) + new_weights.sum(-1, keepdim=True)
    context = (past_weights @ past[1] + new_weights @ new_values) / total
    context = context.reshape(1, heads, block_len, head_dim).transpose(1, 2).reshape(1, block_len, heads * head_dim)
    return attention.o_proj(context)


class DraftBackboneWithCache(nn.Module):
    """`DSparkDraftModel.forward_block` with the context cache as explicit inputs and outputs, plus `lm_head`.

    Reuses the reference's modules; only the cache handling differs: the cache comes in as head-major buffers
    read in place (`_attend_in_place`), the new context's K/V go out, and positions are an input instead of the
    cache length. Each layer is the reference's decoder layer written out (norm, attention, residual, MLP).
    """

    def __init__(self, model: DSparkDraftModel):
        super().__init__()
        self.model = model

    def forward(self, inputs_embeds: torch.Tensor, hidden_states: torch.Tensor, position_ids: torch.Tensor,
                *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        config = self.model.config
        context = self.model.project_context(hidden_states)
        new_len = hidden_states.shape[1]
        cached = position_ids[0, :1]  # the new context starts right after the C cached positions
        cos, sin = rope_cos_sin(position_ids[0], head_dim=config.head_dim, theta=config.rope_theta)
        hidden, presents = inputs_embeds, []
        for index, layer in enumerate(self.model.layers):
            new = layer.self_attn.project_kv(context, cos[:new_len], sin[:new_len])  # [1, Hkv, N, D] each
            hidden = hidden + _attend_in_place(layer.self_attn, layer.input_layernorm(hidden), cached,
                                               past[2 * index:2 * index + 2], new, (cos[new_len:], sin[new_len:]))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
            presents += new
        hidden = self.model.norm(hidden)
        return (self.model.lm_head(hidden), hidden, *presents)


def draft_info(checkpoint: DraftCheckpoint) -> DraftInfo:
    """The rt_info a runtime needs, from a validated checkpoint."""
    config = checkpoint.config
    return DraftInfo(draft_mode="dspark", target_layer_ids=config.target_layer_ids,
                     mask_token_id=config.mask_token_id, block_size=config.block_size, vocab_size=config.vocab_size,
                     draft_vocab_size=config.draft_vocab_size, markov_rank=config.markov_rank,
                     markov_head_type=config.markov_head_type, top_k=config.markov_top_k,
                     confidence_head=config.enable_confidence_head)


def _name_ports(ports, names: list[str]) -> None:
    for port, name in zip(ports, names, strict=True):
        port.get_tensor().set_names({name})


def convert_backbone(model: DSparkDraftModel, d2t: np.ndarray):
    """Converts the backbone to an `ov.Model` with named ports and the `d2t` constant output.

    Args:
        model: the reference draft (eval mode).
        d2t: [Vd] int64 delta-encoded map from draft to target ids.

    Returns:
        The model, not yet saved.
    """
    import openvino as ov
    from openvino import opset15 as ops

    config = model.config
    hidden, layers = config.hidden_size, config.num_hidden_layers
    kv_heads, head_dim = config.num_key_value_heads, config.head_dim
    past_names = [name for i in range(layers) for name in (past_key(i), past_value(i))]
    context_width, new_len, cached, buffer = len(config.target_layer_ids) * hidden, 3, 2, 4  # examples; dynamic
    example = (torch.zeros(1, config.block_size, hidden), torch.zeros(1, new_len, context_width),
               torch.arange(cached, cached + new_len + config.block_size)[None],
               *[torch.zeros(1, kv_heads, buffer, head_dim)] * len(past_names))
    shapes = [ov.PartialShape([1, -1, hidden]), ov.PartialShape([1, -1, context_width]),
              ov.PartialShape([1, -1])] + [ov.PartialShape([1, kv_heads, -1, head_dim])] * len(past_names)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.trace is what ov.convert_model uses
        ov_model = ov.convert_model(DraftBackboneWithCache(model).eval(), example_input=example, input=shapes)
    _name_ports(ov_model.inputs, [INPUTS_EMBEDS, HIDDEN_STATES, POSITION_IDS, *past_names])
    _name_ports(ov_model.outputs, [LOGITS, LAST_HIDDEN_STATE,
                                   *[name for i in range(layers) for name in (present_key(i), present_value(i))]])
    d2t_result = ops.result(ops.constant(np.asarray(d2t, dtype=np.int64)))
    d2t_result.output(0).get_tensor().set_names({D2T})
    ov_model.add_results([d2t_result])
    return ov_model


def convert_markov_head(checkpoint: DraftCheckpoint):
    """Builds the Markov head IR (both walks + confidence head) from a validated checkpoint."""
    tensors, config = checkpoint.tensors, checkpoint.config
    weights = MarkovHeadWeights(
        markov_w1=tensors["markov_head.markov_w1.weight"], markov_w2=tensors["markov_head.markov_w2.weight"],
        target_ids=checkpoint.target_ids, confidence_weight=tensors.get("confidence_head.proj.weight"),
        confidence_bias=tensors.get("confidence_head.proj.bias"),
        confidence_with_markov=config.confidence_head_with_markov)
    return build_markov_head(weights, block_size=config.block_size, hidden_size=config.hidden_size)


def _load_checked(source: Path, drafts_per_step: int | None) -> tuple[DraftCheckpoint, DSparkDraftModel]:
    """Validates the draft with the reference loader; rejects what this exporter cannot represent."""
    checkpoint = load_draft_checkpoint(source, drafts_per_step=drafts_per_step)
    if not checkpoint.config.markov_rank:
        raise DraftValidationError(f"{source / DRAFT_CONFIG}: markov_rank=0: the draft has no Markov head, "
                                   f"which the DSpark export needs")
    if "lm_head.weight" not in checkpoint.tensors:
        raise DraftValidationError(f"{source / DRAFT_CONFIG}: the draft has no lm_head of its own (it shares the "
                                   f"target's); this exporter handles drafts with their own lm_head")
    return checkpoint, DSparkDraftModel.from_checkpoint(checkpoint)


def _exported_config(checkpoint: DraftCheckpoint) -> dict:
    """The source's config.json as the export read it (`DSparkConfig`): the drafts per step stated once, at the top
    level, and a field given flat and nested with two values given the value used in both places, so whoever
    reads the exported folder (this suite, vLLM's or DeepSpec's reading) finds what the IR was built with."""
    config = json.loads((checkpoint.folder / DRAFT_CONFIG).read_text())
    config.pop("num_speculative_tokens", None)
    for method in (config.get("speculators_config") or {}).get("proposal_methods") or []:
        method.pop("speculative_tokens", None)
    nested = config.get("dflash_config") or {}
    nested.pop("block_size", None)
    for key in set(nested) & set(config):
        nested[key] = config[key]
    return config | {"block_size": checkpoint.config.block_size}


def _copy_source_files(checkpoint: DraftCheckpoint, folder: Path) -> None:
    (folder / DRAFT_CONFIG).write_text(json.dumps(_exported_config(checkpoint), indent=2) + "\n")
    mapping = checkpoint.folder / LOCAL_TO_TARGET
    if mapping.is_file():
        shutil.copyfile(mapping, folder / LOCAL_TO_TARGET)
    else:  # an unpruned draft may ship none; write the (identity) ids so every export has the file
        (folder / LOCAL_TO_TARGET).write_text(json.dumps(checkpoint.target_ids.tolist()) + "\n")


def export_draft(source: Path | str, out: Path | str, *, weight_format: str = "fp32", overwrite: bool = False,
                 drafts_per_step: int | None = None) -> Path:
    """Exports a DSpark draft folder to `out`: backbone IR, Markov head IR, rt_info, config and id map.

    Args:
        source: a draft folder (tiny or `openbmb/MiniCPM-OCR-1.0-DSpark`), validated before anything is written.
        out: the folder to create; written atomically.
        weight_format: "fp32" (the reference), "fp16" (weights stored in fp16; inputs/outputs stay f32), "int8"
            or "int4" (NNCF; under INT4 the lm_head and the Markov tables stay INT8: `utils.export.compression`).
        overwrite: replace an existing `out`.
        drafts_per_step: the drafts per step (the block's positions), overriding the fields of config.json that
            state them; the exported config.json states the count used, at the top level.

    Returns:
        `out`.

    Raises:
        DraftValidationError: the source is not a draft this exporter can use (nothing is written).
        FileExistsError: `out` exists and `overwrite` is False.
    """
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format={weight_format!r} must be one of {WEIGHT_FORMATS}")
    source, out = Path(source), Path(out)
    checkpoint, model = _load_checked(source, drafts_per_step)
    info = draft_info(checkpoint)
    d2t = checkpoint.target_ids - np.arange(checkpoint.config.draft_vocab_size, dtype=np.int64)
    with atomic_directory(out, overwrite=overwrite) as staging:
        for name, convert in ((DRAFT_MODEL, lambda: convert_backbone(model, d2t)),
                              (MARKOV_HEAD_MODEL, lambda: convert_markov_head(checkpoint))):
            ov_model = convert()
            write_draft_info(ov_model, info)
            save_ir(ov_model, staging / name, weight_format=weight_format)
            del ov_model  # one IR in memory at a time
        _copy_source_files(checkpoint, staging)
    return out
