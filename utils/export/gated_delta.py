"""The chunked gated delta rule of Gated DeltaNet in PyTorch, written to trace into a static OpenVINO graph.

Same mathematics as HF `torch_chunk_gated_delta_rule` (`models/qwen3_5/modeling_qwen3_5.py`), with three
differences that matter for export:

- The unit lower-triangular system of each chunk is inverted with a product of matrix powers,
  (I + L)^-1 = (I - L)(I + L^2)(I + L^4)..., which is exact because L is strictly lower triangular
  (nilpotent), needs only matmuls, and for chunks of up to 16 tokens takes four factors.
- It returns the per-token state corrections `delta` ("v_new" in HF; the beta-scaled prediction error of
  each token), which is what lets a runtime rebuild the recurrent state after any prefix (see the runtime's
  `rebuild_recurrent_state`).
- The chunk loop unrolls at trace time. With `pad_to`, the sequence is zero-padded to that many tokens inside
  the graph first, so any S <= pad_to runs the same unrolled chunks: a dynamic-S IR. Padding at the end is
  exact: a padded token has k = v = 0, beta = 0 and g = 0, so it changes neither the state nor the earlier
  outputs (each output depends only on the tokens before it).

Shape symbols:
    S: tokens, Hv: value heads (keys and queries already repeated to Hv), dk: key dim, dv: value dim.
"""

from __future__ import annotations

import math

import torch

__all__ = ["chunk_gated_delta_rule", "DEFAULT_CHUNK_SIZE"]

DEFAULT_CHUNK_SIZE = 16


def _unit_lower_inverse(strictly_lower: torch.Tensor) -> torch.Tensor:
    """Inverse of (I + L) for a strictly lower-triangular L, as a product of (I + N^(2^j)), N = -L."""
    size = strictly_lower.shape[-1]
    identity = torch.eye(size, dtype=strictly_lower.dtype)
    power = -strictly_lower
    inverse = identity + power
    for _ in range(1, max(1, math.ceil(math.log2(size)))):
        power = power @ power
        inverse = inverse + inverse @ power
    return inverse


def _chunk(query, key, value, log_decay, beta, state):
    """One chunk of the gated delta rule; returns (output, new state, per-token corrections)."""
    size = query.shape[-2]
    lower_with_diagonal = torch.tril(torch.ones(size, size, dtype=torch.bool))
    cumulative = log_decay.cumsum(dim=-1)  # [1, Hv, c]
    pairwise = cumulative.unsqueeze(-1) - cumulative.unsqueeze(-2)  # [1, Hv, c, c]: G_i - G_j
    pairwise = torch.where(lower_with_diagonal, pairwise, torch.full_like(pairwise, -math.inf)).exp()

    key_beta = key * beta.unsqueeze(-1)
    strictly_lower = torch.tril((key_beta @ key.transpose(-1, -2)) * pairwise, diagonal=-1)
    solve = _unit_lower_inverse(strictly_lower)
    new_values = solve @ (value * beta.unsqueeze(-1))
    decayed_keys = solve @ (key_beta * cumulative.exp().unsqueeze(-1))

    delta = new_values - decayed_keys @ state  # [1, Hv, c, dv]
    intra = (query @ key.transpose(-1, -2)) * pairwise
    output = (query * cumulative.exp().unsqueeze(-1)) @ state + intra @ delta
    last = cumulative[..., -1:]  # [1, Hv, 1]
    key_to_end = key * (last - cumulative).exp().unsqueeze(-1)
    new_state = state * last.exp().unsqueeze(-1) + key_to_end.transpose(-1, -2) @ delta
    return output, new_state, delta


def chunk_gated_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    log_decay: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    pad_to: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Runs the gated delta rule over S tokens in chunks of `chunk_size`.

    The recurrence per token t is: state = exp(g_t) * state; delta_t = beta_t * (v_t - state^T k_t);
    state = state + k_t delta_t^T; output_t = state^T q_t.

    Args:
        query: [1, Hv, S, dk], l2-normalised and scaled by dk^-0.5.
        key: [1, Hv, S, dk], l2-normalised.
        value: [1, Hv, S, dv].
        log_decay: [1, Hv, S], g_t <= 0.
        beta: [1, Hv, S], in (0, 1).
        initial_state: [1, Hv, dk, dv], the state before the first token.
        chunk_size: tokens per chunk (the matrix-power inverse needs ceil(log2(chunk_size)) factors).
        pad_to: the most tokens S may be, for a graph whose S is dynamic (None: S is static).

    Returns:
        output [1, Hv, S, dv], final state [1, Hv, dk, dv], per-token corrections delta [1, Hv, S, dv].
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size} must be >= 1")
    length = query.shape[-2]  # traced: the slices below follow the real S of a dynamic graph
    if pad_to is not None:
        query, key, value, log_decay, beta = (_pad_tokens(x, pad_to) for x in (query, key, value, log_decay, beta))
    state = initial_state
    outputs, deltas = [], []
    for start in range(0, pad_to or length, chunk_size):
        piece = slice(start, start + chunk_size)
        output, state, delta = _chunk(query[..., piece, :], key[..., piece, :], value[..., piece, :],
                                      log_decay[..., piece], beta[..., piece], state)
        outputs.append(output)
        deltas.append(delta)
    return torch.cat(outputs, dim=-2)[..., :length, :], state, torch.cat(deltas, dim=-2)[..., :length, :]


def _pad_tokens(x: torch.Tensor, length: int) -> torch.Tensor:
    """x [1, Hv, S(, d)] zero-padded to `length` tokens on axis 2, for any S <= length (no shape arithmetic:
    append `length` zeros, keep the first `length`)."""
    zeros = torch.zeros(x.shape[:2] + (length,) + x.shape[3:], dtype=x.dtype)
    return torch.cat((x, zeros), dim=2)[:, :, :length]
