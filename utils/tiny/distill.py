"""Distils the tiny draft on the tiny target's own greedy answers, so offline runs show real acceptance.

A random draft almost never matches the random target (about 1 token per step). Real DSpark drafts are
trained on their target's outputs; this does the same at toy scale, on CPU, deterministically for a seed.

Objective (DeepSpec `deepspec/modeling/dspark/loss.py`, greedy form):
- Cross-entropy of the block logits plus the Markov bias against the target's next tokens at every block
  position (position k predicts token k+1 after the anchor), the Markov head fed the previous *target*
  token (teacher forcing), weighted by `exp(-k / loss_decay_gamma)`. Labels outside the pruned draft
  vocabulary cannot be predicted and are left out of this term.
- The confidence head, trained with binary cross-entropy to predict per position whether the draft's
  greedy token there equals the target's, given that the earlier positions were accepted (DeepSpec's
  per-position acceptance rate `1 - TV(draft, target)`, which is this indicator for greedy decoding).
  Out-of-vocabulary labels count as rejections.
All draft tensors train (backbone, `fc`, norms, `lm_head`, Markov head, confidence head). Given
`calibration_pages`, the confidence head is then refitted on fresh pages (`utils.tiny.confidence`).

The pruned vocabulary is re-chosen first, as real pruned vocabularies are: the `draft_vocab_size` tokens the
target writes most often in the training answers (EOS always in). The tiny builder's random subset covers
under half of what the random target writes, which would cap acceptance near one token per step whatever
the training. Tokens kept keep their draft ids; the freed ids take the new tokens, so `d2t` stays an
unsorted delta encoding and the folder keeps the published layout (names, shapes, `local-to-target.json`).

Shape symbols: N sequences, A anchors per sequence, B block size, Vd draft vocabulary.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from utils.checkpoint.draft import DRAFT_WEIGHTS, EXPORT_AUDIT, LOCAL_TO_TARGET, TargetSpec
from utils.files import sha256_file
from utils.reference.modeling import DSparkDraftModel, load_reference_draft
from utils.tiny.anchor_batch import anchor_batch, draft_index_of
from utils.tiny.anchor_forward import forward_anchor_blocks
from utils.tiny.config import Checkpoints, DistillConfig
from utils.tiny.confidence import CalibrationReport, calibrate_confidence_head
from utils.tiny.distill_data import DistillSequence, collect_sequences, training_pages
from utils.tiny.training import quiet_single_thread, train_steps

__all__ = ["DistillReport", "frequent_vocabulary", "distill_draft", "dspark_loss", "alignment_loss"]

# Reference module parameter -> published checkpoint tensor, where the two names differ.
_CHECKPOINT_NAMES = {
    "markov_w1.weight": "markov_head.markov_w1.weight",
    "markov_w2.weight": "markov_head.markov_w2.weight",
    "confidence_proj.weight": "confidence_head.proj.weight",
    "confidence_proj.bias": "confidence_head.proj.bias",
}


@dataclass(frozen=True)
class DistillReport:
    """What a distillation did."""

    sequences: int
    label_tokens: int
    built_vocabulary_coverage: float  # share of the answer tokens the builder's random vocabulary holds
    vocabulary_coverage: float  # share the re-chosen vocabulary holds (the rest is left out of the CE term)
    first_loss: float
    last_loss: float
    calibration: CalibrationReport | None = None  # the confidence head refitted on fresh pages, if it was


def alignment_loss(context_weights: list[torch.Tensor], glyph_positions: torch.Tensor) -> torch.Tensor:
    """Mean negative log attention of every block position, in every head of the draft's last layer, on the image
    token that shows the token it predicts. Training only: it tells a draft where on a typewriter page its next
    characters are. The earlier layers stay free to gather what the block needs to find them (the anchor, the
    characters before it).

    Args:
        context_weights: per layer [N, heads, A, B, S], from `forward_anchor_blocks`.
        glyph_positions: [N, A, B] context position of that image token, -1 where there is none.
    """
    shown = glyph_positions >= 0
    if not shown.any():
        return torch.zeros(())
    weights = context_weights[-1]
    index = glyph_positions.clamp(min=0)[:, None, ..., None].expand(*weights.shape[:-1], 1)
    return -torch.log(weights.gather(-1, index)[..., 0] + 1e-6).mean(1)[shown].mean()


def dspark_loss(model: DSparkDraftModel, block_hidden: torch.Tensor, *, previous_ids: torch.Tensor,
                labels: torch.Tensor, present: torch.Tensor, draft_index: torch.Tensor, loss_decay_gamma: float,
                confidence_alpha: float) -> tuple[torch.Tensor, dict]:
    """The DSpark objective (greedy form, see the module docstring) for blocks run at anchors.

    Args:
        block_hidden: [N, A, B, H] output of `forward_anchor_blocks`.
        previous_ids: [N, A, B] the target token before each label (`AnchorBatch.previous_ids`).
        labels: [N, A, B] target ids the target wrote after each anchor.
        present: [N, A, B] bool, where a label exists.
        draft_index: [V] draft id of each target id, -1 outside the draft vocabulary.
        loss_decay_gamma: position k weighs `exp(-k / gamma)`.
        confidence_alpha: weight of the confidence term.

    Returns:
        (scalar loss, {"ce": ..., "confidence": ..., "accuracy": ...} as floats).
    """
    block_size = labels.shape[-1]
    scores = model.logits(block_hidden) + model.markov_bias(previous_ids)  # [N, A, B, Vd]
    label_draft = draft_index[labels]
    in_vocabulary = present & (label_draft >= 0)
    weight = present * torch.exp(-torch.arange(block_size) / loss_decay_gamma)
    ce_weight = weight * in_vocabulary
    cross_entropy = F.cross_entropy(scores.flatten(0, 2), label_draft.clamp(min=0).flatten(), reduction="none")
    ce = (cross_entropy * ce_weight.flatten()).sum() / ce_weight.sum().clamp(min=1e-6)
    accepted = (scores.argmax(-1) == label_draft) & in_vocabulary
    confidence = model.confidence(block_hidden, previous_ids).clamp(1e-6, 1 - 1e-6)
    bce = F.binary_cross_entropy(confidence, accepted.float(), reduction="none")
    confidence_loss = (bce * weight).sum() / weight.sum().clamp(min=1e-6)
    stats = {"ce": ce.item(), "confidence": confidence_loss.item(),
             "accuracy": (accepted.sum() / in_vocabulary.sum().clamp(min=1)).item()}
    return ce + confidence_alpha * confidence_loss, stats


def frequent_vocabulary(target_ids: np.ndarray, counts: Counter, *, eos_token_id: int) -> np.ndarray:
    """The draft vocabulary re-chosen as the most frequent target tokens, keeping the draft ids of those kept.

    Args:
        target_ids: [Vd] the current draft vocabulary (target id of each draft id).
        counts: how often the target wrote each target id.
        eos_token_id: always in the vocabulary.

    Returns:
        [Vd] int64 target id of each draft id: ranked by count, ties to the current vocabulary, then to the
        smaller id.
    """
    current = set(target_ids.tolist())
    candidates = set(counts) | current | {eos_token_id}
    ranked = sorted(candidates, key=lambda t: (t != eos_token_id, -counts[t], t not in current, t))
    chosen = set(ranked[:len(target_ids)])
    newcomers = iter(t for t in ranked if t in chosen and t not in current)
    return np.array([t if t in chosen else next(newcomers) for t in target_ids.tolist()], dtype=np.int64)


def _shuffled_batches(count: int, *, size: int, seed: int) -> Iterator[list[int]]:
    """Endless batches of `size` indices below `count`, in seeded random epochs (a batch may span two)."""
    generator = torch.Generator().manual_seed(seed)
    order = []
    while True:
        if len(order) < size:
            order += torch.randperm(count, generator=generator).tolist()
        yield order[:size]
        order = order[size:]


def _train(model: DSparkDraftModel, embed_tokens: torch.nn.Module, sequences: list[DistillSequence],
           config: DistillConfig, checkpoints: Checkpoints | None) -> tuple[float, float]:
    """`config.steps` steps of `sequences_per_step` sequences each, drawn in a seeded random order (epochs); with
    `checkpoints`, saved as `distill` and resumed, the batches already drawn drawn again and dropped."""
    draft_config = model.config
    draft_index = draft_index_of(model)
    chosen_batches = _shuffled_batches(len(sequences), size=config.sequences_per_step, seed=config.seed)
    anchor_generator = torch.Generator().manual_seed(config.seed)

    def next_batch():
        return anchor_batch([sequences[i] for i in next(chosen_batches)], block_size=draft_config.block_size,
                            mask_token_id=draft_config.mask_token_id,
                            anchors_per_sequence=config.anchors_per_sequence, generator=anchor_generator)

    def step_loss(step: int) -> tuple[torch.Tensor, dict]:
        batch = next_batch()
        with torch.no_grad():
            block_embeds = embed_tokens(batch.block_ids)
        hidden, context_weights = forward_anchor_blocks(model, block_embeds, batch.target_hidden,
                                                        batch.anchor_positions)
        loss, stats = dspark_loss(model, hidden, previous_ids=batch.previous_ids, labels=batch.labels,
                                  present=batch.present, draft_index=draft_index,
                                  loss_decay_gamma=config.loss_decay_gamma, confidence_alpha=config.confidence_alpha)
        shown = {"accuracy": stats["accuracy"]}
        if config.alignment_weight:
            alignment = alignment_loss(context_weights, batch.glyph_positions)
            loss = loss + config.alignment_weight * alignment
            shown["align"] = alignment.item()
        return loss, shown

    model.train()
    losses = train_steps(model.parameters(), step_loss, steps=config.steps, learning_rate=config.learning_rate,
                         desc="distilling the tiny draft", checkpoints=checkpoints, name="distill",
                         skip=lambda done: [next_batch() for _ in range(done)])
    model.eval()
    return losses[0], losses[-1]


def _write_draft(model: DSparkDraftModel, draft_dir: Path) -> None:
    """Rewrites the weights, `d2t` and `local-to-target.json` (same names, shapes, order) and the audit hashes."""
    from safetensors.numpy import load_file, save_file

    path, mapping = draft_dir / DRAFT_WEIGHTS, draft_dir / LOCAL_TO_TARGET
    tensors = load_file(str(path))
    for name, parameter in model.state_dict().items():
        published = _CHECKPOINT_NAMES.get(name, name)
        if published in tensors:
            tensors[published] = parameter.detach().numpy().astype(np.float32)
    target_ids = model.target_ids.numpy().astype(np.int64)
    tensors["d2t"] = target_ids - np.arange(len(target_ids), dtype=np.int64)
    save_file(dict(sorted(tensors.items())), str(path), metadata={"format": "pt"})
    mapping.write_text(json.dumps(target_ids.tolist()) + "\n")
    audit_path = draft_dir / EXPORT_AUDIT
    audit = json.loads(audit_path.read_text())
    audit |= {"weights_sha256": sha256_file(path), "local_to_target_sha256": sha256_file(mapping),
              "vocabulary": "the draft_vocab_size tokens the target writes most (distilled)"}
    audit_path.write_text(json.dumps(audit, indent=2) + "\n")


def distill_draft(target_dir: Path | str, draft_dir: Path | str, config: DistillConfig | None = None, *,
                  checkpoints: Checkpoints | None = None) -> DistillReport:
    """Re-chooses the draft vocabulary and trains the draft in `draft_dir` on the target's greedy answers.

    Runs single-threaded so that the same seed gives the same weights on one machine (not across CPUs).

    Args:
        target_dir: the tiny target folder (transformers).
        draft_dir: the tiny draft folder (published layout); `model.safetensors`, `local-to-target.json`
            and `export-audit.json` are rewritten, `config.json` is kept.
        config: data and training options; defaults to `DistillConfig()`.
        checkpoints: save the training's progress there and resume from it (the target's answers are read again).

    Returns:
        A `DistillReport`.
    """
    from transformers import AutoModelForImageTextToText, AutoProcessor

    config = config or DistillConfig()
    checkpoints = checkpoints and checkpoints.stamped("distill", config.options())
    target_dir, draft_dir = Path(target_dir), Path(draft_dir)
    with quiet_single_thread():
        torch.manual_seed(config.seed)
        target = AutoModelForImageTextToText.from_pretrained(target_dir).eval()
        processor = AutoProcessor.from_pretrained(target_dir)
        model = load_reference_draft(draft_dir, target=TargetSpec.from_folder(target_dir))
        sequences = _answers(target, processor, model, config, pages=config.pages, seed=config.seed)
        if not sequences:
            raise ValueError("distill_draft: the target wrote no answer of two tokens or more; nothing to learn")
        answers = torch.cat([s.token_ids[s.prompt_length:] for s in sequences])
        built_coverage = _coverage(model, answers)
        model.target_ids = torch.from_numpy(frequent_vocabulary(
            model.target_ids.numpy(), Counter(answers.tolist()), eos_token_id=target.generation_config.eos_token_id))
        first_loss, last_loss = _train(model, target.get_input_embeddings(), sequences, config, checkpoints)
        calibration = None
        if config.calibration_pages:
            fresh = _answers(target, processor, model, config, pages=config.calibration_pages, seed=config.seed + 1)
            calibration = calibrate_confidence_head(model, target.get_input_embeddings(), fresh)
        _write_draft(model, draft_dir)
    return DistillReport(len(sequences), len(answers), built_coverage, _coverage(model, answers), first_loss,
                         last_loss, calibration)


def _answers(target, processor, model: DSparkDraftModel, config: DistillConfig, *, pages: int, seed: int
             ) -> list[DistillSequence]:
    """The target's answers on `pages` generated pages of the configured style, for every configured prompt."""
    cases = [(page, prompt) for page in training_pages(pages, seed=seed, style=config.page_style,
                                                       unmoved_share=config.unmoved_share, kinds=config.page_kinds)
             for prompt in config.prompts]
    return collect_sequences(target, processor, cases, hidden_layer_ids=model.config.target_layer_ids,
                             max_new_tokens=config.max_new_tokens)


def _coverage(model: DSparkDraftModel, tokens: torch.Tensor) -> float:
    return (draft_index_of(model)[tokens] >= 0).float().mean().item()
