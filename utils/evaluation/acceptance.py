"""Acceptance statistics of speculative decoding from step records (numpy only).

Shared by the tiny draft's held-out check and the benchmark. Conventions:
- a step emits `t_0 .. t_a`: `a` drafts were accepted (`StepRecord.accepted`), tokens per step is `a + 1`;
- draft position k (1-based) is *reached* when the k-1 drafts before it were accepted (and the step was not
  cut by EOS or the budget before it); its conditional acceptance is P(accepted | reached);
- its share of acceptance is P(accepted | verified): every step that verified a draft at k counts, so the share
  falls along the block as each position adds one more chance to fail;
- the confidence head predicts that conditional acceptance, so only reached positions are scored (a draft
  the confidence cut left unverified is reached, and shown, when the verified drafts before it were all
  accepted: the step's last token is the target's at its position).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from utils.engine.verification import StepRecord

__all__ = ["confidence_auc", "scored_positions", "tokens_per_step_histogram", "conditional_acceptance",
           "acceptance_by_position", "reliability_bins", "replay_threshold"]


def confidence_auc(scores: Sequence[float], accepted: Sequence[bool]) -> float:
    """Area under the ROC curve: the probability that an accepted position scores above a rejected one.

    Ties count one half (the Mann-Whitney statistic). NaN when either class is empty.
    """
    scores, accepted = np.asarray(scores, dtype=np.float64), np.asarray(accepted, dtype=bool)
    if scores.shape != accepted.shape:
        raise ValueError(f"{scores.shape[0]} scores but {accepted.shape[0]} labels")
    positives, negatives = scores[accepted], scores[~accepted]
    if not len(positives) or not len(negatives):
        return float("nan")
    order = np.sort(negatives)
    below = np.searchsorted(order, positives, side="left")
    ties = np.searchsorted(order, positives, side="right") - below
    return float((below + 0.5 * ties).sum() / (len(positives) * len(negatives)))


def scored_positions(steps: Sequence[StepRecord]) -> tuple[list[float], list[bool]]:
    """(confidence, accepted) of every reached draft position whose fate the step shows.

    A step emits `t_0 .. t_a`; draft i is accepted while it equals `t_i`, so the accepted drafts and the first
    rejected one are scored. When the confidence cut left drafts unverified and every verified one was accepted,
    the step's last token is the target's own at the first cut draft's position: that draft is scored too (it
    would have been accepted exactly when it equals that token), so a cut does not hide the drafts it judged.
    A step cut by EOS or the budget before its first mismatch tells nothing about the rest of its drafts.
    """
    scores, labels = [], []
    for step in steps:
        if step.confidences is None:
            continue
        for drafted, emitted, confidence in zip(step.drafted, step.emitted, step.confidences):
            scores.append(confidence)
            labels.append(drafted == emitted)
            if drafted != emitted:
                break
        else:
            verified = len(step.drafted)
            if step.cut and step.cut_confidences and len(step.emitted) > verified:
                scores.append(step.cut_confidences[0])
                labels.append(step.cut[0] == step.emitted[verified])
    return scores, labels


def _drafting_steps(steps: Sequence[StepRecord]) -> list[StepRecord]:
    return [step for step in steps if step.drafted]


def tokens_per_step_histogram(steps: Sequence[StepRecord], *, max_tokens: int | None = None) -> list[int]:
    """counts[n] = number of drafting steps that emitted n tokens (n = accepted + 1; index 0 is always 0)."""
    emitted = [step.accepted + 1 for step in _drafting_steps(steps)]
    size = max(max_tokens or 0, max(emitted, default=0)) + 1
    return np.bincount(np.asarray(emitted, dtype=np.int64), minlength=size).tolist()


def _accepted_and_observed(step: StepRecord) -> tuple[int, int]:
    """(drafts accepted, draft positions whose fate is known) of one step.

    A step cut by EOS or the token budget stops emitting while its drafts still match, so the positions after
    the cut were never checked: they count neither as accepted nor as rejected.
    """
    accepted = step.matched_drafts
    rejected_seen = accepted < len(step.drafted) and accepted < len(step.emitted)
    return accepted, accepted + rejected_seen


def conditional_acceptance(steps: Sequence[StepRecord]) -> list[dict]:
    """Per draft position k = 1, 2, ... (up to the drafts per step): how often it was reached (and checked),
    accepted, and P(accepted | reached)."""
    counts = [_accepted_and_observed(step) for step in _drafting_steps(steps)]
    longest = max((observed for _, observed in counts), default=0)
    rows = []
    for position in range(1, longest + 1):
        reached = sum(1 for accepted, observed in counts if observed >= position and accepted >= position - 1)
        accepted = sum(1 for accepted, _ in counts if accepted >= position)
        rows.append({"position": position, "reached": reached, "accepted": accepted,
                     "rate": accepted / reached if reached else float("nan")})
    return rows


def acceptance_by_position(steps: Sequence[StepRecord]) -> list[dict]:
    """Per draft position k = 1, 2, ... (up to the drafts per step): how many steps verified a draft there, how many
    accepted it, and the share accepted / verified.

    Greedy verification accepts draft k only with every draft before it, so a step whose earlier draft was
    rejected counts as verified and not accepted at k. Positions after a cut by EOS or the budget were never
    checked and count in neither. With every position verified and no cut, 1 + the sum of the shares is the
    mean tokens per drafting step.
    """
    drafting = _drafting_steps(steps)
    if not drafting:
        return []
    accepted, observed = np.array([_accepted_and_observed(step) for step in drafting]).T
    drafted = np.array([len(step.drafted) for step in drafting])
    positions = np.arange(1, drafted.max() + 1)[:, None]  # one row per position, one column per step
    verified = (positions <= drafted) & ((observed > accepted) | (positions <= accepted))
    hits = positions <= accepted
    return [{"position": int(k), "verified": int(n), "accepted": int(a), "share": float(a / n) if n else float("nan")}
            for k, n, a in zip(positions[:, 0], verified.sum(axis=1), hits.sum(axis=1))]


def reliability_bins(scores: Sequence[float], accepted: Sequence[bool], *, bins: int = 10) -> list[dict]:
    """Reliability diagram data: per confidence bin, the mean prediction and the observed acceptance."""
    scores, accepted = np.asarray(scores, dtype=np.float64), np.asarray(accepted, dtype=bool)
    edges = np.linspace(0.0, 1.0, bins + 1)
    index = np.clip(np.digitize(scores, edges[1:-1]), 0, bins - 1)
    rows = []
    for b in range(bins):
        chosen = index == b
        rows.append({"low": float(edges[b]), "high": float(edges[b + 1]), "count": int(chosen.sum()),
                     "predicted": float(scores[chosen].mean()) if chosen.any() else float("nan"),
                     "observed": float(accepted[chosen].mean()) if chosen.any() else float("nan")})
    return rows


def replay_threshold(steps: Sequence[StepRecord], threshold: float) -> dict:
    """What a confidence threshold would have done to steps run with every draft verified (threshold 0).

    The walk does not depend on the threshold, so each step would have verified the leading drafts whose
    confidence reaches it (the confident prefix) and accepted min(accepted, prefix) of them; steps without
    confidences are kept whole.

    Returns:
        {"threshold", "steps", "drafts verified" and "accepted drafts" at threshold 0 and at `threshold`
        ("... at threshold"), "accepted drafts lost"}.
    """
    drafting = _drafting_steps(steps)
    verified = kept = accepted = accepted_kept = 0
    for step in drafting:
        prefix = len(step.drafted)
        if step.confidences is not None:
            prefix = next((index for index, score in enumerate(step.confidences) if score < threshold), prefix)
        verified, kept = verified + len(step.drafted), kept + prefix
        accepted, accepted_kept = accepted + step.matched_drafts, accepted_kept + min(step.matched_drafts, prefix)
    return {"threshold": threshold, "steps": len(drafting), "drafts verified": verified,
            "drafts verified at threshold": kept, "accepted drafts": accepted,
            "accepted drafts at threshold": accepted_kept, "accepted drafts lost": accepted - accepted_kept}
