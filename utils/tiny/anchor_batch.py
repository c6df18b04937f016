"""Blocks at anchors of the target's answers: the batches that distillation and calibration run the draft on.

Every answer position but the last can be an anchor; the block that follows it holds the anchor, then masks, and
its labels are the tokens the target wrote next. Shape symbols: N sequences, A anchors per sequence, B block
size, S positions of the longest sequence, V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from utils.reference.modeling import DSparkDraftModel
from utils.tiny.distill_data import DistillSequence

__all__ = ["AnchorBatch", "anchor_batch", "draft_index_of"]


@dataclass(frozen=True)
class AnchorBatch:
    """Padded batch: block inputs and labels of every anchor."""

    block_ids: torch.Tensor  # [N, A, B] target ids of [anchor, mask, ...]
    target_hidden: torch.Tensor  # [N, S, L*H]
    anchor_positions: torch.Tensor  # [N, A]
    labels: torch.Tensor  # [N, A, B] target ids of the tokens after the anchor (0 where absent)
    present: torch.Tensor  # [N, A, B] bool: the label exists (inside the answer, real anchor)
    glyph_positions: torch.Tensor  # [N, A, B] position of the image token where the label starts, -1 where none

    @property
    def previous_ids(self) -> torch.Tensor:
        """[N, A, B] the target token before each label (the anchor, then the labels): the Markov head's input."""
        return torch.cat((self.block_ids[..., :1], self.labels[..., :-1]), dim=-1)


def _anchor_choice(sequence: DistillSequence, limit: int, generator: torch.Generator) -> torch.Tensor:
    """The anchor positions used: every answer position but the last, or `limit` of them drawn at random."""
    positions = torch.arange(sequence.prompt_length, len(sequence.token_ids) - 1)
    if 0 < limit < len(positions):
        positions = positions[torch.randperm(len(positions), generator=generator)[:limit].sort().values]
    return positions


def anchor_batch(sequences: list[DistillSequence], *, block_size: int, mask_token_id: int,
                 anchors_per_sequence: int = 0, generator: torch.Generator | None = None) -> AnchorBatch:
    """The blocks at the anchors of `sequences` (all of them, or `anchors_per_sequence` drawn with `generator`)."""
    generator = generator or torch.Generator().manual_seed(0)
    chosen = [_anchor_choice(s, anchors_per_sequence, generator) for s in sequences]
    length = max(len(s.token_ids) for s in sequences)
    shape = (len(sequences), max(map(len, chosen)), block_size)
    block_ids = torch.full(shape, mask_token_id)
    target_hidden = torch.zeros(len(sequences), length, sequences[0].target_hidden.shape[-1])
    anchor_positions = torch.zeros(shape[:2], dtype=torch.long)
    labels = torch.zeros(shape, dtype=torch.long)
    present = torch.zeros(shape, dtype=torch.bool)
    glyph_positions = torch.full(shape, -1)
    for n, (sequence, positions) in enumerate(zip(sequences, chosen)):
        tokens, size, count = sequence.token_ids, len(sequence.token_ids), len(positions)
        target_hidden[n, :size] = sequence.target_hidden
        anchor_positions[n, :count] = positions
        block_ids[n, :count, 0] = tokens[positions]
        label_positions = positions[:, None] + torch.arange(1, block_size + 1)
        present[n, :count] = label_positions < size
        labels[n, :count] = torch.where(present[n, :count], tokens[label_positions.clamp(max=size - 1)], 0)
        # the cell where each label starts on a typewriter page (`DistillSequence.token_cells`), -1 where unknown
        answer_index = (label_positions - sequence.prompt_length).clamp(max=len(sequence.token_cells) - 1)
        cells = torch.where(present[n, :count], sequence.token_cells[answer_index], -1)
        shown = (cells >= 0) & (cells < len(sequence.image_positions))
        glyph_positions[n, :count] = torch.where(
            shown, sequence.image_positions[cells.clamp(0, len(sequence.image_positions) - 1)], -1)
    return AnchorBatch(block_ids, target_hidden, anchor_positions, labels, present, glyph_positions)


def draft_index_of(model: DSparkDraftModel) -> torch.Tensor:
    """[V] the draft id of each target id, -1 outside the draft vocabulary."""
    index = torch.full((model.config.vocab_size,), -1, dtype=torch.long)
    index[model.target_ids] = torch.arange(model.config.draft_vocab_size)
    return index
