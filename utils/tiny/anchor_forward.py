"""Many DSpark blocks of one batch in one pass, for training: the same function as `forward_block`, batched.

DeepSpec trains a DSpark draft on many anchors of a sequence at once: every block `[anchor, mask, ...]`
attends to the target's context features before its anchor and to its own positions, never to another
block (a block-sparse mask). This module runs the reference `DSparkDraftModel`'s own modules that way;
the attention is split into a context part (masked by anchor position) and a block part (each block with
itself), joined under one softmax, which equals the reference's softmax over `cat(context, block)`.

Shape symbols:
    N: sequences, S: positions per sequence (padded), A: anchors per sequence (padded), B: block size,
    H: hidden size, L: target layers read.
"""

from __future__ import annotations

import torch

from utils.reference.modeling import DSparkAttention, DSparkDraftModel, apply_rope, rope_cos_sin

__all__ = ["forward_anchor_blocks"]


def _rope(positions: torch.Tensor, config) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [T, head_dim] for any-shaped positions, flattened."""
    return rope_cos_sin(positions.reshape(-1), head_dim=config.head_dim, theta=config.rope_theta)


def _split_batch(x: torch.Tensor, batch: int) -> torch.Tensor:
    """[1, heads, batch*T, d] (the reference's batch-of-one layout) -> [batch, heads, T, d]."""
    heads, flat, dim = x.shape[1:]
    return x.view(heads, batch, flat // batch, dim).transpose(0, 1)


def _block_attention(attention: DSparkAttention, block: torch.Tensor, context_kv: tuple[torch.Tensor, torch.Tensor],
                     block_rope: tuple[torch.Tensor, torch.Tensor], context_mask: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of every block over the context before its anchor and over itself: (output, context weights).

    Args:
        block: [1, N*A*B, H] normed block states, flattened.
        context_kv: keys/values [N, kv_heads, S, head_dim].
        block_rope: cos/sin [N*A*B, head_dim].
        context_mask: [N, A, 1, S] True where the block may read the context position.

    Returns:
        ([1, N*A*B, H] attention output, [N, heads, A, B, S] attention weights on the context positions).
    """
    config = attention.config
    batch, anchors, _, _ = context_mask.shape
    groups = config.num_attention_heads // config.num_key_value_heads
    cos, sin = block_rope
    queries = apply_rope(attention.q_norm(attention._heads(attention.q_proj(block), config.num_attention_heads)),
                         cos, sin)
    block_keys, block_values = attention.project_kv(block, cos, sin)
    queries = _split_batch(queries, batch).unflatten(2, (anchors, -1))  # [N, heads, A, B, d]
    block_keys, block_values = (_split_batch(x, batch).unflatten(2, (anchors, -1)).repeat_interleave(groups, dim=1)
                                for x in (block_keys, block_values))
    context_keys, context_values = (x.repeat_interleave(groups, dim=1)[:, :, None] for x in context_kv)
    scale = config.head_dim ** -0.5
    context_scores = (queries @ context_keys.transpose(-1, -2) * scale).masked_fill(~context_mask[:, None], -torch.inf)
    block_scores = queries @ block_keys.transpose(-1, -2) * scale
    weights = torch.softmax(torch.cat((context_scores, block_scores), dim=-1), dim=-1)
    context_weights, block_weights = weights.split((context_scores.shape[-1], block_scores.shape[-1]), dim=-1)
    output = context_weights @ context_values + block_weights @ block_values  # [N, heads, A, B, d]
    return attention.o_proj(output.permute(0, 2, 3, 1, 4).reshape(1, block.shape[1], -1)), context_weights


def forward_anchor_blocks(model: DSparkDraftModel, block_embeds: torch.Tensor, target_hidden: torch.Tensor,
                          anchor_positions: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Runs a block at every anchor; block `a` reads the context positions before `anchor_positions[n, a]`.

    Equals `model.forward_block(block_embeds[n, a][None], target_hidden[n, :anchor][None], empty cache)` for
    every block (tested to 1e-5), with gradients, in one pass.

    Args:
        block_embeds: [N, A, B, H] target embeddings of `[anchor, mask, ..., mask]` per anchor.
        target_hidden: [N, S, L*H] concatenated target layer outputs (positions past a sequence's end are
            never read, since anchors lie inside it).
        anchor_positions: [N, A] position of each anchor in its sequence (the block covers anchor .. anchor+B-1).

    Returns:
        ([N, A, B, H] final hidden states of the blocks (after `norm`), per layer the [N, heads, A, B, S] attention
        weights of the block positions on the context positions, for an alignment loss).
    """
    config = model.config
    batch, anchors, block_size, hidden_size = block_embeds.shape
    length = target_hidden.shape[1]
    context = model.project_context(target_hidden.reshape(1, batch * length, -1))
    context_positions = torch.arange(length).repeat(batch)
    block_positions = anchor_positions[..., None] + torch.arange(block_size)
    context_rope, block_rope = _rope(context_positions, config), _rope(block_positions, config)
    context_mask = (torch.arange(length) < anchor_positions[..., None])[:, :, None]  # [N, A, 1, S]
    hidden, context_weights = block_embeds.reshape(1, -1, hidden_size), []
    for layer in model.layers:
        context_kv = tuple(_split_batch(x, batch) for x in layer.self_attn.project_kv(context, *context_rope))
        attended, weights = _block_attention(layer.self_attn, layer.input_layernorm(hidden), context_kv, block_rope,
                                             context_mask)
        hidden = hidden + attended
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        context_weights.append(weights)
    return model.norm(hidden).view(batch, anchors, block_size, hidden_size), context_weights
