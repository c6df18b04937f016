"""The DSpark draft in PyTorch: the plain reference that the OpenVINO export and runtime are tested against.

Follows DeepSpec's `Qwen3DSparkModel` (`deepspec/modeling/dspark`). A block is `[anchor, mask, ..., mask]` embedded
with the *target's* embedding table. Each layer takes queries from the block only and keys/values from the
projected context followed by the block, with RoPE over absolute positions and no causal mask. The context
keys/values are cached per layer and grow with the text; the block's are dropped after each step.

Shape symbols:
    N: new context positions, C: cached context positions, B: block size, H: hidden size,
    L: number of target layers read (len(target_layer_ids)), Vd: draft vocabulary, r: Markov rank.
"""

from __future__ import annotations

import torch
from torch import nn

from utils.checkpoint.config import DSparkConfig
from utils.checkpoint.draft import DraftCheckpoint, TargetSpec, check_draft_fits_target, load_draft_checkpoint

__all__ = ["DSparkRMSNorm", "DSparkAttention", "DSparkDecoderLayer", "DraftContextCache", "DSparkDraftModel",
           "load_reference_draft"]


class DSparkRMSNorm(nn.Module):
    """Qwen3 RMSNorm: `weight * x / rms(x)` (weight starts at one)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Rotates half the hidden dims of the input."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def rope_cos_sin(positions: torch.Tensor, *, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [P, head_dim] for absolute positions [P] (full rotary, as Qwen3)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [1, heads, P, head_dim]; cos/sin: [P, head_dim]."""
    return x * cos + rotate_half(x) * sin


class DraftContextCache:
    """Per-layer keys/values of the projected context, [1, kv_heads, C, head_dim] each; grows and can be cropped."""

    def __init__(self, num_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    @property
    def length(self) -> int:
        """Number of cached context positions C."""
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def append(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Appends one layer's new context keys/values and returns the whole cached context of that layer."""
        if self.keys[layer] is not None:
            keys = torch.cat((self.keys[layer], keys), dim=2)
            values = torch.cat((self.values[layer], values), dim=2)
        self.keys[layer], self.values[layer] = keys, values
        return keys, values

    def crop(self, length: int) -> None:
        """Keeps the first `length` context positions (for example after a rollback)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a context cache of {self.length} positions to {length}")
        self.keys = [None if k is None else k[:, :, :length] for k in self.keys]
        self.values = [None if v is None else v[:, :, :length] for v in self.values]


class DSparkAttention(nn.Module):
    """Non-causal attention of the block over the cached context and itself, with q/k norm (Qwen3)."""

    def __init__(self, config: DSparkConfig):
        super().__init__()
        self.config = config
        head_dim, bias = config.head_dim, config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(config.num_attention_heads * head_dim, config.hidden_size, bias=bias)
        self.q_norm = DSparkRMSNorm(head_dim, config.rms_norm_eps)
        self.k_norm = DSparkRMSNorm(head_dim, config.rms_norm_eps)

    def _heads(self, x: torch.Tensor, count: int) -> torch.Tensor:
        return x.view(1, x.shape[1], count, self.config.head_dim).transpose(1, 2)

    def project_kv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (normed, rotated) and values of x [1, P, H] at the positions of cos/sin."""
        kv_heads = self.config.num_key_value_heads
        keys = apply_rope(self.k_norm(self._heads(self.k_proj(x), kv_heads)), cos, sin)
        return keys, self._heads(self.v_proj(x), kv_heads)

    def project_queries(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Queries (normed, rotated) [1, heads, P, head_dim] of x [1, P, H] at the positions of cos/sin."""
        return apply_rope(self.q_norm(self._heads(self.q_proj(x), self.config.num_attention_heads)), cos, sin)

    def forward(self, block: torch.Tensor, context_keys: torch.Tensor, context_values: torch.Tensor,
                block_rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """block: [1, B, H] (normed); context keys/values: [1, kv_heads, C, head_dim]."""
        cos, sin = block_rope
        queries = self.project_queries(block, cos, sin)
        block_keys, block_values = self.project_kv(block, cos, sin)
        keys = torch.cat((context_keys, block_keys), dim=2)
        values = torch.cat((context_values, block_values), dim=2)
        groups = self.config.num_attention_heads // self.config.num_key_value_heads
        keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
        weights = torch.softmax(queries @ keys.transpose(-1, -2) * self.config.head_dim ** -0.5, dim=-1)
        output = (weights @ values).transpose(1, 2).reshape(1, block.shape[1], -1)
        return self.o_proj(output)


class DSparkMLP(nn.Module):
    """SwiGLU feed-forward of a Qwen3 layer."""

    def __init__(self, config: DSparkConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class DSparkDecoderLayer(nn.Module):
    """A Qwen3 decoder layer whose attention also reads the context keys/values."""

    def __init__(self, config: DSparkConfig):
        super().__init__()
        self.self_attn = DSparkAttention(config)
        self.mlp = DSparkMLP(config)
        self.input_layernorm = DSparkRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = DSparkRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, block: torch.Tensor, context_keys: torch.Tensor, context_values: torch.Tensor,
                block_rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        block = block + self.self_attn(self.input_layernorm(block), context_keys, context_values, block_rope)
        return block + self.mlp(self.post_attention_layernorm(block))


class DSparkDraftModel(nn.Module):
    """DSpark draft backbone with its pruned `lm_head`, vanilla Markov head and confidence head.

    The draft owns no embedding table: callers embed the block with the target's table.
    """

    def __init__(self, config: DSparkConfig):
        super().__init__()
        self.config = config
        hidden, rank = config.hidden_size, config.markov_rank
        self.layers = nn.ModuleList(DSparkDecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.fc = nn.Linear(len(config.target_layer_ids) * hidden, hidden, bias=False)
        self.hidden_norm = DSparkRMSNorm(hidden, config.rms_norm_eps)
        self.norm = DSparkRMSNorm(hidden, config.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, config.draft_vocab_size, bias=False)
        self.markov_w1 = nn.Embedding(config.vocab_size, rank) if rank else None  # [V, r], by previous target id
        self.markov_w2 = nn.Linear(rank, config.draft_vocab_size, bias=False) if rank else None  # [Vd, r]
        width = hidden + (rank if config.confidence_head_with_markov else 0)
        self.confidence_proj = nn.Linear(width, 1) if config.enable_confidence_head else None
        self.register_buffer("target_ids", torch.arange(config.draft_vocab_size), persistent=False)

    @classmethod
    def from_checkpoint(cls, checkpoint: DraftCheckpoint, *, target_lm_head: torch.Tensor | None = None
                        ) -> "DSparkDraftModel":
        """Builds the model from a validated checkpoint (a non-pruned draft without `lm_head` uses the target's)."""
        model = cls(checkpoint.config)
        renames = {"markov_head.markov_w1.weight": "markov_w1.weight",
                   "markov_head.markov_w2.weight": "markov_w2.weight",
                   "confidence_head.proj.weight": "confidence_proj.weight",
                   "confidence_head.proj.bias": "confidence_proj.bias"}
        state = {renames.get(name, name): torch.from_numpy(array.copy()) for name, array in checkpoint.tensors.items()}
        if "lm_head.weight" not in state:
            if target_lm_head is None:
                raise ValueError(f"{checkpoint.folder}: the draft has no lm_head; pass the target's as target_lm_head")
            state["lm_head.weight"] = target_lm_head.detach().float()
        model.load_state_dict(state, strict=True)
        model.target_ids = torch.from_numpy(checkpoint.target_ids.copy())
        return model.eval()

    def project_context(self, target_hidden: torch.Tensor) -> torch.Tensor:
        """[1, N, L*H] concatenated target layer outputs -> [1, N, H] context features (`fc` + `hidden_norm`)."""
        return self.hidden_norm(self.fc(target_hidden))

    def forward_block(self, block_embeds: torch.Tensor, new_target_hidden: torch.Tensor, cache: DraftContextCache
                      ) -> torch.Tensor:
        """Runs one block and extends the context cache.

        Args:
            block_embeds: [1, B, H] target embeddings of `[anchor, mask, ..., mask]`.
            new_target_hidden: [1, N, L*H] target hidden states of the positions not yet in `cache`; the block
                starts right after them (the anchor's position is `cache.length + N`).
            cache: the context cache, extended in place by N positions.

        Returns:
            [1, B, H] final hidden states of the block (after `norm`).
        """
        config = self.config
        context = self.project_context(new_target_hidden)
        start, block_len = cache.length, block_embeds.shape[1]
        new_len = context.shape[1]
        positions = torch.arange(start, start + new_len + block_len)
        cos, sin = rope_cos_sin(positions, head_dim=config.head_dim, theta=config.rope_theta)
        context_rope = (cos[:new_len], sin[:new_len])
        block_rope = (cos[new_len:], sin[new_len:])
        hidden = block_embeds
        for index, layer in enumerate(self.layers):
            keys, values = layer.self_attn.project_kv(context, *context_rope)
            keys, values = cache.append(index, keys, values)
            hidden = layer(hidden, keys, values, block_rope)
        return self.norm(hidden)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[1, B, H] -> [1, B, Vd] block logits U over the draft vocabulary."""
        return self.lm_head(hidden)

    def markov_bias(self, previous_target_ids: torch.Tensor) -> torch.Tensor:
        """[K] previous target ids -> [K, Vd] Markov bias `W2 @ W1[prev]`."""
        return self.markov_w2(self.markov_w1(previous_target_ids))

    def confidence_features(self, hidden: torch.Tensor, previous_target_ids: torch.Tensor) -> torch.Tensor:
        """[K, H] hidden, [K] previous target ids -> the confidence head's input: `[h_k ; W1[prev_k]]`, or `h_k`."""
        if self.config.confidence_head_with_markov:
            return torch.cat((hidden, self.markov_w1(previous_target_ids)), dim=-1)
        return hidden

    def confidence(self, hidden: torch.Tensor, previous_target_ids: torch.Tensor) -> torch.Tensor:
        """[K, H] hidden, [K] previous target ids -> [K] predicted probability that each draft token is accepted."""
        return torch.sigmoid(self.confidence_proj(self.confidence_features(hidden, previous_target_ids))).squeeze(-1)


def load_reference_draft(folder, *, target: TargetSpec | None = None,
                         target_lm_head: torch.Tensor | None = None) -> DSparkDraftModel:
    """Validates a draft folder (and, given `target`, that it was made for that target) and builds the model."""
    checkpoint = load_draft_checkpoint(folder)
    if target is not None:
        check_draft_fits_target(checkpoint, target)
    return DSparkDraftModel.from_checkpoint(checkpoint, target_lm_head=target_lm_head)
