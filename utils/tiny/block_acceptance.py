"""How far a draft gets along its block, before any engine: teacher-forced at every anchor of the target's answers.

A reading through the engine meets the draft only at the anchors its steps start from, and its confidence cut
decides which drafts are verified, so its acceptance along the block is that of the blocks the head let through.
Here every answer position is an anchor and nothing is cut: at block position k a draft counts when every draft
before it in its block was accepted, so the rate at k is the acceptance given the prefix, and the mean accepted
prefix + 1 is the tokens per step of a decoder that verifies every block in full. With the Markov head fed the
target's previous token, an accepted prefix is exactly what the dense walk drafts (its choices are the target's
tokens there); without the head it is the per-position argmax (DFlash's drafting).

Shape symbols: N sequences, A anchors, B block size.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from utils.reference.modeling import DSparkDraftModel
from utils.tiny.anchor_batch import AnchorBatch, anchor_batch, draft_index_of
from utils.tiny.anchor_forward import forward_anchor_blocks
from utils.tiny.distill_data import DistillSequence

__all__ = ["WAYS", "blocks_at_every_anchor", "accepted_prefixes", "acceptance_along_block"]

WAYS = ("markov_walk", "argmax")  # with the Markov bias of the previous target token, and without it
_SEQUENCES_PER_PASS = 4


def blocks_at_every_anchor(model: DSparkDraftModel, embed_tokens: torch.nn.Module, sequences: list[DistillSequence]
                           ) -> Iterator[tuple[AnchorBatch, torch.Tensor]]:
    """The draft run at every anchor of `sequences`, a few sequences a pass: (the pass's `AnchorBatch`, its block
    hidden states [N, A, B, H])."""
    config = model.config
    for start in range(0, len(sequences), _SEQUENCES_PER_PASS):
        batch = anchor_batch(sequences[start:start + _SEQUENCES_PER_PASS], block_size=config.block_size,
                             mask_token_id=config.mask_token_id)
        hidden, _ = forward_anchor_blocks(model, embed_tokens(batch.block_ids), batch.target_hidden,
                                          batch.anchor_positions)
        yield batch, hidden


def accepted_prefixes(hits: torch.Tensor, present: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Which block positions are reached and accepted when a block is verified in full.

    Args:
        hits: [..., B] bool, the draft chose the target's token at that position.
        present: [..., B] bool, the position has a label (inside the answer).

    Returns:
        (reached [..., B]: every position before it accepted, accepted [..., B]: reached and a hit).
    """
    accepted = (hits & present).long().cumprod(-1).bool()
    reached = torch.cat((torch.ones_like(accepted[..., :1]), accepted[..., :-1]), dim=-1) & present
    return reached, accepted


@torch.no_grad()
def acceptance_along_block(model: DSparkDraftModel, embed_tokens: torch.nn.Module,
                           sequences: list[DistillSequence]) -> dict:
    """Acceptance at each block position and tokens per step, with the Markov walk and with the argmax (`WAYS`).

    Returns:
        JSON-ready {way: {"tokens_per_step": 1 + mean accepted prefix, "anchors": ..., "rate": [per position],
        "reached": [per position]}}.
    """
    config, index = model.config, draft_index_of(model)
    reached = {way: torch.zeros(config.block_size) for way in WAYS}
    accepted = {way: torch.zeros(config.block_size) for way in WAYS}
    anchors = 0
    for batch, hidden in blocks_at_every_anchor(model, embed_tokens, sequences):
        logits, labels = model.logits(hidden), index[batch.labels]
        real = batch.present[..., 0]  # a padded anchor has no first label
        anchors += int(real.sum())
        for way, scores in zip(WAYS, (logits + model.markov_bias(batch.previous_ids), logits)):
            hits = (scores.argmax(-1) == labels) & (labels >= 0)
            way_reached, way_accepted = accepted_prefixes(hits, batch.present)
            reached[way] += way_reached[real].sum(0)
            accepted[way] += way_accepted[real].sum(0)
    return {way: {"tokens_per_step": round(1 + accepted[way].sum().item() / max(anchors, 1), 4), "anchors": anchors,
                  "rate": [round(x, 4) for x in (accepted[way] / reached[way].clamp(min=1)).tolist()],
                  "reached": reached[way].int().tolist()}
            for way in WAYS}
