"""The chunked gated delta rule of Gated DeltaNet in PyTorch, written to trace into one OpenVINO graph of dynamic S.

Same mathematics as HF `torch_chunk_gated_delta_rule` (`models/qwen3_5/modeling_qwen3_5.py`), with four
differences that matter for export:

- The unit lower-triangular system of each chunk is inverted with a product of matrix powers,
  (I + L)^-1 = (I - L)(I + L^2)(I + L^4)..., which is exact because L is strictly lower triangular
  (nilpotent), needs only matmuls, and for chunks of up to 16 tokens takes four factors.
- It returns the per-token state corrections `delta` ("v_new" in HF; the beta-scaled prediction error of
  each token), which is what lets a runtime rebuild the recurrent state after any prefix (see the runtime's
  `rebuild_recurrent_state`).
- S is dynamic up to `max_length` without a loop op and without computing on padding. The S tokens are cut
  into n = ceil(S / chunk) chunks (the last one zero-padded, which is exact: a padded token has k = v = 0,
  beta = 0 and g = 0, and each output depends only on the tokens before it), and everything inside a chunk
  is computed for all n chunks at once. Only the state passed from chunk to chunk is sequential: the trace
  unrolls ceil(max_length / chunk) slots, and slot j slices chunk j, which is an empty tensor when j >= n;
  the state update after slot j is gated by the slice of chunk j + 1, so it is empty when no chunk follows,
  and an unused slot works on empty tensors only (microseconds, not passes over the [Hv, dk, dv] state).
- The final state is computed once from all tokens, S_S = exp(G_S) S_0 + sum_t exp(G_S - G_t) k_t delta_t^T
  (the rollback formula at count S), so no slot has to tell whether it was the last one used.

Every exponent is of a non-positive number (G is a cumulative sum of g <= 0 and only G_i - G_j with i >= j
appears), so nothing overflows, however long the call. And no exponent is a difference of two cumulative sums:
G_i - G_j is the sum of the g between j and i (one matmul with a constant 0/1 matrix), G_S - G_t a reverse
cumulative sum. A difference cancels: after 128 tokens of strong decay |G| reaches a few thousand, where bf16 (the
CPU plugin's default precision) is 8 to 16 apart, so exp(G_S - G_t) came out e^16 too large or too small and the
final state, which the next call of a prompt starts from, was lost (docs/performance.md). A direct sum rounds in
proportion to its own size, small wherever exp of it matters.

Shape symbols:
    S: tokens, n: chunks, c: chunk size, Hv: value heads (keys and queries already repeated to Hv),
    dk: key dim, dv: value dim.
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


def _sums_between(chunk_log_decay: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """[1, Hv, n, c, 1] log-decays -> [1, Hv, n, c, c] with [i, j] = sum of g_s over j < s <= i (0 where j >= i).

    One matmul with a constant 0/1 matrix [c, c * c] that selects, for each (i, j), the tokens in between."""
    index = torch.arange(chunk_size)
    selected = (index[None, None, :] > index[None, :, None]) & (index[None, None, :] <= index[:, None, None])
    selector = selected.reshape(chunk_size * chunk_size, chunk_size).transpose(0, 1).to(chunk_log_decay.dtype)
    sums = chunk_log_decay.transpose(-1, -2) @ selector  # [1, Hv, n, 1, c * c]
    return sums.unflatten(-1, (chunk_size, chunk_size)).squeeze(-3)


def _chunks(x: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """[1, Hv, S, d] -> [1, Hv, n, c, d], n = ceil(S / c), the last chunk zero-padded.

    `unfold` keeps complete windows only, so appending c - 1 zeros gives exactly n windows, with no shape
    arithmetic on the traced S.
    """
    zeros = torch.zeros(x.shape[:2] + (chunk_size - 1,) + x.shape[3:], dtype=x.dtype)
    return torch.cat((x, zeros), dim=2).unfold(2, chunk_size, chunk_size).transpose(-1, -2)


def chunk_gated_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    log_decay: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor,
    *,
    max_length: int,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Runs the gated delta rule over S <= `max_length` tokens in chunks of `chunk_size`.

    The recurrence per token t is: state = exp(g_t) * state; delta_t = beta_t * (v_t - state^T k_t);
    state = state + k_t delta_t^T; output_t = state^T q_t.

    Args:
        query: [1, Hv, S, dk], l2-normalised and scaled by dk^-0.5.
        key: [1, Hv, S, dk], l2-normalised.
        value: [1, Hv, S, dv].
        log_decay: [1, Hv, S], g_t <= 0.
        beta: [1, Hv, S], in (0, 1).
        initial_state: [1, Hv, dk, dv], the state before the first token.
        max_length: the most tokens S may be (a traced graph ignores the tokens after it).
        chunk_size: tokens per chunk (the matrix-power inverse needs ceil(log2(chunk_size)) factors).

    Returns:
        output [1, Hv, S, dv], final state [1, Hv, dk, dv], per-token corrections delta [1, Hv, S, dv].
    """
    if chunk_size < 1 or max_length < 1:
        raise ValueError(f"chunk_size={chunk_size} and max_length={max_length} must be >= 1")
    length = query.shape[-2]  # traced: the slices below follow the real S of a dynamic graph
    dim_k, dim_v = key.shape[-1], value.shape[-1]
    packed = torch.cat((query, key, value, log_decay.unsqueeze(-1), beta.unsqueeze(-1)), dim=-1)
    chunk_query, chunk_key, chunk_value, chunk_log_decay, chunk_beta = torch.split(
        _chunks(packed, chunk_size), [dim_k, dim_k, dim_v, 1, 1], dim=-1)  # [1, Hv, n, c, *]

    cumulative = chunk_log_decay.cumsum(dim=-2)  # [1, Hv, n, c, 1]: G_i from the chunk's start
    between = _sums_between(chunk_log_decay, chunk_size)  # [1, Hv, n, c, c]: G_i - G_j, summed directly
    lower_with_diagonal = torch.tril(torch.ones(chunk_size, chunk_size, dtype=torch.bool))
    pairwise = torch.where(lower_with_diagonal, between, torch.full_like(between, -math.inf)).exp()
    key_beta = chunk_key * chunk_beta
    solve = _unit_lower_inverse(torch.tril((key_beta @ chunk_key.transpose(-1, -2)) * pairwise, diagonal=-1))
    new_values = solve @ (chunk_value * chunk_beta)
    decayed_keys = solve @ (key_beta * cumulative.exp())
    decayed_queries = chunk_query * cumulative.exp()
    intra = (chunk_query @ chunk_key.transpose(-1, -2)) * pairwise
    to_end = between[..., -1:, :].transpose(-1, -2)  # [1, Hv, n, c, 1]: G_last - G_i
    keys_to_end = (chunk_key * to_end.exp()).transpose(-1, -2)  # [1, Hv, n, dk, c]
    chunk_decay = cumulative[..., -1:, :].exp()  # [1, Hv, n, 1, 1]

    state = initial_state.unsqueeze(2)  # [1, Hv, 1, dk, dv]; empty on axis 2 once the chunks run out
    outputs, deltas = [], []
    for index in range(math.ceil(max_length / chunk_size)):
        piece, following = slice(index, index + 1), slice(index + 1, index + 2)  # empty when past chunk n - 1
        delta = new_values[:, :, piece] - decayed_keys[:, :, piece] @ state
        outputs.append(decayed_queries[:, :, piece] @ state + intra[:, :, piece] @ delta)
        deltas.append(delta)
        gate = chunk_decay[:, :, following] * 0.0 + 1.0  # ones, empty when no chunk follows: skip the update
        state = state * (chunk_decay[:, :, piece] * gate) + keys_to_end[:, :, piece] @ (delta * gate)
    output = torch.cat(outputs, dim=2).flatten(2, 3)[:, :, :length]
    delta = torch.cat(deltas, dim=2).flatten(2, 3)[:, :, :length]

    total = log_decay.sum(dim=-1, keepdim=True)  # [1, Hv, 1]
    after = log_decay.flip(-1).cumsum(dim=-1).flip(-1) - log_decay  # [1, Hv, S]: G_S - G_t, the g after t
    weighted_keys = key * after.exp().unsqueeze(-1)
    final_state = initial_state * total.exp().unsqueeze(-1) + weighted_keys.transpose(-1, -2) @ delta
    return output, final_state, delta
