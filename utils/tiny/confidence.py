"""Calibrates the tiny draft's confidence head after distillation, on pages the draft never trained on.

Distillation trains the head jointly with the draft on whether each draft was accepted. But the distilled draft
reads its own training pages almost perfectly, so the head sees few rejections and rates nearly every draft
about 1: on held-out pages its AUC was 0.78 (teacher-forced, all anchors). The draft's own probability of its
greedy token ranks acceptance much better there (AUC 0.96). The published head cannot compute that probability,
since it is one linear layer on `[h_k ; W1[prev_k]]` and a softmax is not linear. So calibration keeps every
other tensor, which leaves the drafts unchanged, and fits the head again in two convex steps on fresh pages:

1. Direction: ridge regression of the log-odds of the draft's own probability of its greedy token on the head's
   features. This soft label exists at every position, while rejections are rare; its log-odds, not the
   probability, because the rejections sit where the probability is near 1 and a fit to the probability itself
   flattens there (held-out AUC at every anchor 0.895 fitting the probability, 0.910 its log-odds; in readings at
   the defaults, random pages 0.745 against 0.784, look-alikes 0.688 against 0.749: docs/tiny-pair.md).
2. Scale: Platt scaling of that score on whether each draft was accepted (two numbers). The confidence is then
   the probability of acceptance that the reliability curve checks.

Positions are scored as the decoder meets them. Each block runs at an anchor of the target's answer, with the
Markov head fed the previous target token. A position counts only when every draft before it in the block was
accepted (DeepSpec's per-position acceptance; after a rejection the walk would have drafted from a wrong prefix).

Shape symbols: P scored positions, F features of the head (hidden size + Markov rank).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from utils.evaluation.acceptance import confidence_auc
from utils.reference.modeling import DSparkDraftModel
from utils.tiny.anchor_batch import draft_index_of
from utils.tiny.block_acceptance import accepted_prefixes, blocks_at_every_anchor
from utils.tiny.distill_data import DistillSequence

__all__ = ["CalibrationReport", "ScoredDrafts", "scored_drafts", "calibrate_confidence_head", "rank_confidence"]

_DIRECTION_L2 = 1.0  # ridge on standardised features: the soft labels are many, near-duplicate positions
_SURE = 1e-7  # a probability of 1 in float32 is 1 - 1e-7 here: log-odds of about 16, not infinity


@dataclass(frozen=True)
class ScoredDrafts:
    """The draft's greedy token at every scored position of every anchor's block."""

    features: torch.Tensor  # [P, F] the confidence head's input `[h_k ; W1[prev_k]]`
    draft_probability: torch.Tensor  # [P] the draft's softmax probability of its own greedy token
    accepted: torch.Tensor  # [P] bool: the target wrote that token


@dataclass(frozen=True)
class CalibrationReport:
    """What calibration measured on its own pages (held-out figures are in the pair's manifest)."""

    positions: int
    rejected: int
    auc_before: float  # the jointly trained head
    auc_after: float  # the calibrated head
    auc_of_draft_probability: float  # the ranking the direction learns from

    def as_dict(self) -> dict:
        return {"positions": self.positions, "rejected": self.rejected, "auc_before": round(self.auc_before, 4),
                "auc_after": round(self.auc_after, 4),
                "auc_of_draft_probability": round(self.auc_of_draft_probability, 4)}


@torch.no_grad()
def scored_drafts(model: DSparkDraftModel, embed_tokens: torch.nn.Module, sequences: list[DistillSequence]
                  ) -> ScoredDrafts:
    """Runs the draft at every anchor of `sequences` and keeps the positions the decoder would score."""
    index = draft_index_of(model)
    features, probabilities, accepted = [], [], []
    for batch, hidden in blocks_at_every_anchor(model, embed_tokens, sequences):
        previous = batch.previous_ids
        probability, greedy = (model.logits(hidden) + model.markov_bias(previous)).softmax(-1).max(-1)
        label = index[batch.labels]
        hit = (greedy == label) & (label >= 0)
        scored, _ = accepted_prefixes(hit, batch.present)
        features.append(model.confidence_features(hidden, previous)[scored])
        probabilities.append(probability[scored])
        accepted.append(hit[scored])
    return ScoredDrafts(torch.cat(features), torch.cat(probabilities), torch.cat(accepted))


def rank_confidence(model: DSparkDraftModel, embed_tokens: torch.nn.Module, sequences: list[DistillSequence]
                    ) -> dict:
    """How well the confidence head ranks the drafts the target rejects, at every anchor of `sequences`.

    A reading meets the draft only at the anchors its steps start from, so a draft that is hardly ever rejected
    leaves a reading's AUC resting on a rejection or two. Every anchor of the answers gives the head many more
    rejections to rank, and the AUC of the draft's own probability beside it is what a head could reach.

    Returns:
        JSON-ready: "positions", "rejected", "auc" (the head), "auc_of_draft_probability".
    """
    drafts = scored_drafts(model, embed_tokens, sequences)
    labels = drafts.accepted.numpy()
    with torch.no_grad():
        head = model.confidence_proj(drafts.features)[:, 0].numpy()
    return {"positions": len(labels), "rejected": int((~drafts.accepted).sum()),
            "auc": round(confidence_auc(head, labels), 4),
            "auc_of_draft_probability": round(confidence_auc(drafts.draft_probability.numpy(), labels), 4)}


def _ridge_fit(inputs: torch.Tensor, targets: torch.Tensor, *, l2: float) -> torch.nn.Linear:
    """Least-squares fit of a linear layer to `targets`, the weights penalised by `l2` (closed form)."""
    design = torch.cat((inputs, torch.ones_like(inputs[:, :1])), dim=1)
    penalty = l2 * torch.eye(design.shape[1], dtype=design.dtype)
    penalty[-1, -1] = 0.0  # the intercept is not penalised
    solution = torch.linalg.solve(design.T @ design + penalty, design.T @ targets)
    layer = torch.nn.Linear(inputs.shape[1], 1).double()
    with torch.no_grad():
        layer.weight.copy_(solution[None, :-1])
        layer.bias.copy_(solution[-1:])
    return layer


def _logistic_fit(inputs: torch.Tensor, labels: torch.Tensor) -> torch.nn.Linear:
    """Binary cross-entropy fit of a linear layer to labels in {0, 1} (L-BFGS: convex, deterministic)."""
    layer = torch.nn.Linear(inputs.shape[1], 1).double()
    torch.nn.init.zeros_(layer.weight)
    torch.nn.init.zeros_(layer.bias)
    optimizer = torch.optim.LBFGS(layer.parameters(), max_iter=500, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(layer(inputs)[:, 0], labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return layer


def calibrate_confidence_head(model: DSparkDraftModel, embed_tokens: torch.nn.Module,
                              sequences: list[DistillSequence]) -> CalibrationReport:
    """Refits `model.confidence_proj` in place on `sequences` (see the module docstring); nothing else changes.

    Args:
        model: the distilled draft, its head fed `[h_k ; W1[prev_k]]` (`confidence_head_with_markov`).
        embed_tokens: the target's input embeddings.
        sequences: the target's answers on pages the draft did not train on.

    Raises:
        ValueError: the draft has no such head, there are no answers, or they gave no rejected (or no accepted)
            position.
    """
    if model.confidence_proj is None or not model.config.confidence_head_with_markov:
        raise ValueError("calibrate_confidence_head: the draft has no confidence head on [h_k ; W1[prev_k]]")
    if not sequences:
        raise ValueError("calibrate_confidence_head: no answers to calibrate on")
    drafts = scored_drafts(model, embed_tokens, sequences)
    rejected = int((~drafts.accepted).sum())
    if rejected == 0 or rejected == len(drafts.accepted):
        raise ValueError(f"calibrate_confidence_head: {len(drafts.accepted)} scored positions, {rejected} rejected: "
                         "calibration needs both outcomes (more or other pages)")
    with torch.no_grad():
        before = model.confidence_proj(drafts.features)[:, 0]
    features = drafts.features.double()
    mean, scale = features.mean(0), features.std(0) + 1e-6
    standard = (features - mean) / scale
    log_odds = torch.logit(drafts.draft_probability.double().clamp(_SURE, 1 - _SURE))
    direction = _ridge_fit(standard, log_odds, l2=_DIRECTION_L2)
    with torch.no_grad():
        score = direction(standard)
    platt = _logistic_fit(score, drafts.accepted.double())
    with torch.no_grad():
        weight = platt.weight[0, 0] * direction.weight[0] / scale
        bias = platt.weight[0, 0] * (direction.bias[0] - (direction.weight[0] * mean / scale).sum()) + platt.bias[0]
        model.confidence_proj.weight.copy_(weight[None].float())
        model.confidence_proj.bias.copy_(bias[None].float())
        after = model.confidence_proj(drafts.features)[:, 0]
    labels = drafts.accepted.numpy()
    return CalibrationReport(len(labels), rejected, confidence_auc(before.numpy(), labels),
                             confidence_auc(after.numpy(), labels),
                             confidence_auc(drafts.draft_probability.numpy(), labels))
