"""The two Markov walks of DSpark (reference, PyTorch) and the proposal they make (`utils.engine.proposal.Proposal`).

From block logits U [K, Vd], the draft chooses its tokens left to right, each conditioned on the previous
token in *target* ids (the anchor first):

    prev = anchor
    for k in 0..K-1:
        s_k = U_k + W2 @ W1[prev]
        tok_k = argmax s_k             (a draft id)
        prev = target_id(tok_k)        (through d2t)

- Dense walk: the argmax over the whole draft vocabulary at each step.
- Top-K candidate scorer: the top-K of U_k once per position (K = min(64, Vd)), the Markov bias added to those
  candidates only. With K >= Vd it equals the dense walk.

Ties are broken towards the smallest draft id in both walks, so the two agree exactly when K >= Vd.
"""

from __future__ import annotations

import torch

from utils.engine.proposal import Proposal
from utils.reference.modeling import DSparkDraftModel

__all__ = ["dense_walk", "top_k_walk", "propose"]


def _first_argmax(scores: torch.Tensor) -> int:
    """Index of the largest score, the smallest index among ties."""
    return int(torch.nonzero(scores == scores.max())[0, 0])


def dense_walk(model: DSparkDraftModel, block_logits: torch.Tensor, *, anchor: int) -> tuple[list[int], list[int]]:
    """Dense Markov walk.

    Args:
        block_logits: [K, Vd] U, the draft logits of the positions to propose.
        anchor: target id of the last token the target produced.

    Returns:
        (draft ids [K], previous target ids [K]: the anchor, then the target id of each chosen token but the last).
    """
    draft_ids, previous, prev = [], [], anchor
    for logits in block_logits:
        scores = logits if model.markov_w1 is None else logits + model.markov_bias(torch.tensor([prev]))[0]
        token = _first_argmax(scores)
        draft_ids.append(token)
        previous.append(prev)
        prev = int(model.target_ids[token])
    return draft_ids, previous


def top_k_walk(model: DSparkDraftModel, block_logits: torch.Tensor, *, anchor: int, top_k: int
               ) -> tuple[list[int], list[int]]:
    """Top-K candidate scorer: like `dense_walk`, but scoring only the top-K draft tokens of each position's U."""
    if top_k < 1:
        raise ValueError(f"top_k={top_k} must be >= 1 (use dense_walk for the dense computation)")
    draft_ids, previous, prev = [], [], anchor
    k = min(top_k, block_logits.shape[-1])
    for logits in block_logits:
        # the k best, ties at the k-th place going to the smallest ids (a stable sort keeps id order among equals)
        candidates = torch.sort(torch.sort(logits, descending=True, stable=True).indices[:k]).values
        scores = logits[candidates]
        if model.markov_w1 is not None:
            scores = scores + model.markov_w2.weight[candidates] @ model.markov_w1.weight[prev]
        token = int(candidates[_first_argmax(scores)])
        draft_ids.append(token)
        previous.append(prev)
        prev = int(model.target_ids[token])
    return draft_ids, previous


@torch.no_grad()
def propose(model: DSparkDraftModel, block_hidden: torch.Tensor, *, anchor: int, num_tokens: int,
            markov_head_top_k: int) -> Proposal:
    """Turns a block's hidden states into `num_tokens` draft tokens.

    Args:
        block_hidden: [1, B, H] output of `forward_block`; position k proposes draft token k+1 (anchor-as-first).
        anchor: target id of the block's anchor.
        num_tokens: how many tokens to propose (<= B).
        markov_head_top_k: K of the candidate scorer; 0 selects the dense walk.
    """
    hidden = block_hidden[0, :num_tokens]
    logits = model.logits(hidden)
    if markov_head_top_k:
        draft_ids, previous = top_k_walk(model, logits, anchor=anchor, top_k=markov_head_top_k)
    else:
        draft_ids, previous = dense_walk(model, logits, anchor=anchor)
    confidences = None
    if model.confidence_proj is not None:
        confidences = model.confidence(hidden, torch.tensor(previous)).tolist()
    return Proposal(tuple(int(model.target_ids[i]) for i in draft_ids), None if confidences is None else tuple(confidences))
