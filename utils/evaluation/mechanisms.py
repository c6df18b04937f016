"""What each DSpark mechanism changes on a set of pages: one reading of the pages per way of drafting.

The pages are read three times with one `SpeculativeOcrPipeline`, at the settings given (the command line's
defaults: the device's precision, the confidence cut at 0.5), once per way of choosing the drafts:

- the Top-K candidate scorer (the exported default, K = min(64, draft vocabulary)),
- the dense walk (the Markov walk over the whole draft vocabulary),
- the per-position argmax of the block logits (`PER_POSITION_ARGMAX`): the draft without its Markov head, as a
  DFlash draft proposes.

From those readings, each figure says whether a mechanism changes a number:

- `acceptance_along_the_block`: per way, P(accepted | reached) at the first and the last draft position
  (`conditional_acceptance`); without the walk, each position guesses its token's start on its own, so
  acceptance should decay along the block;
- `tokens_per_step`: per way, and each walk over the argmax;
- `walks_differ`: on the blocks the Top-K reading drafted, the share of draft positions where the Top-K scorer and
  the dense walk choose differently (`compare_walks`), and the Markov head's time per block of each reading;
- `confidence`: how the confidence head ranks the Top-K reading's drafts (AUC, with the rejections it ranks),
  beside the draft's own probability of each draft (its block softmax) ranked the same way;
- `pruned_vocabulary`: the share of the answer tokens outside the draft vocabulary, and how many of them ended a
  step's accepted prefix (the draft cannot propose them, so the target writes them as the bonus token).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD
from utils.engine.verification import StepRecord, mean_tokens_per_step
from utils.evaluation.ablation import PER_POSITION_ARGMAX, compare_walks, recording_blocks
from utils.evaluation.acceptance import conditional_acceptance, confidence_auc, scored_positions
from utils.evaluation.pruned_vocabulary import outside_tokens

__all__ = ["DRAFTING_WAYS", "GOALS", "mechanism_figures", "goal_lines"]

DRAFTING_WAYS = {"top_k_scorer": None, "dense_walk": 0, "argmax": PER_POSITION_ARGMAX}  # name -> markov_head_top_k

# What each figure should show for a draft in the real pair's regime (a demo pair ships only when it does).
GOALS = {
    "argmax_last_over_first": ("<=", 0.8),  # acceptance decays along the block without the walk
    "walk_over_argmax": (">=", 1.05),  # the Markov walk pays
    "top_k_differs_from_dense": (">=", 0.01),  # Top-K is a real approximation of the dense walk
    "rejections": (">=", 500),  # enough rejections for the AUC to mean something
    "confidence_auc": (">=", 0.85),
    "outside_share": (">", 0.0),  # the pruned vocabulary misses some of the target's tokens
}


def _drafting_steps(results) -> list[StepRecord]:
    return [step for result in results for step in result.metrics.steps[1:]]  # the prefill drafts nothing


def _acceptance(steps: Sequence[StepRecord]) -> dict:
    rows = [row for row in conditional_acceptance(steps) if row["reached"]]
    first, last = rows[0], rows[-1]
    return {"first": {key: first[key] for key in ("position", "reached", "accepted", "rate")},
            "last": {key: last[key] for key in ("position", "reached", "accepted", "rate")},
            "last_over_first": last["rate"] / first["rate"] if first["rate"] else math.nan}


def _draft_probabilities(steps: Sequence[StepRecord], blocks: list, local_ids: dict[int, int]) -> list[StepRecord]:
    """The steps with each draft's confidence replaced by the draft's own probability of it (the softmax of its
    block position's logits), so that `scored_positions` ranks those the same way it ranks the head's."""
    if len(blocks) != len(steps):
        raise ValueError(f"{len(blocks)} recorded blocks for {len(steps)} drafting steps")
    replaced = []
    for step, (logits, _, _, _) in zip(steps, blocks):
        drafts = (*step.drafted, *step.cut)
        shifted = logits[:len(drafts)] - logits[:len(drafts)].max(axis=-1, keepdims=True)
        softmax = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
        probabilities = tuple(float(softmax[index, local_ids[draft]]) for index, draft in enumerate(drafts))
        verified = len(step.drafted)
        replaced.append(dataclasses.replace(step, confidences=probabilities[:verified],
                                            cut_confidences=probabilities[verified:]))
    return replaced


def _auc(steps: Sequence[StepRecord]) -> tuple[float | None, int, int]:
    scores, accepted = scored_positions(steps)
    auc = confidence_auc(scores, accepted)
    return None if math.isnan(auc) else auc, len(accepted), accepted.count(False)


def mechanism_figures(pipeline, pages: Iterable, draft_vocabulary: Iterable[int], *, prompt: str | None = None,
                      confidence_threshold: float = DEFAULT_CONFIDENCE_THRESHOLD, max_new_tokens: int = 512) -> dict:
    """Reads `pages` once per way of drafting and measures what each mechanism changes (module docstring).

    Args:
        pipeline: a `SpeculativeOcrPipeline` with a DSpark draft, at the precision to measure.
        pages: objects with an `image` (`utils.pages` pages).
        draft_vocabulary: the target ids the draft can propose (`local-to-target.json`), in draft-id order.
        prompt: the instruction after the image (default: the pipeline's).
        confidence_threshold: the confidence cut of every reading (0 verifies every draft).
        max_new_tokens: the token budget of each page.

    Returns:
        JSON-ready figures: `readings` (per way: tokens per step, steps, acceptance at the first and last
        position, Markov-head ms per block), `walks_differ`, `confidence`, `pruned_vocabulary`, and `summary`, the
        figures `GOALS` names.
    """
    pages, vocabulary = list(pages), [int(token) for token in draft_vocabulary]
    options = dict(max_new_tokens=max_new_tokens, confidence_threshold=confidence_threshold)
    if prompt is not None:
        options["prompt"] = prompt
    readings, steps_of, blocks = {}, {}, []
    for name, top_k in DRAFTING_WAYS.items():
        recorded: list = []
        with recording_blocks(pipeline, recorded):
            results = [pipeline.generate(page.image, markov_head_top_k=top_k, **options) for page in pages]
        steps = _drafting_steps(results)
        all_steps = [step for result in results for step in result.metrics.steps]
        markov_seconds = sum(result.metrics.stage_seconds.get("markov_head", 0.0) for result in results)
        steps_of[name], blocks = steps, recorded if top_k is None else blocks
        readings[name] = {"tokens_per_step": mean_tokens_per_step(all_steps), "steps": len(all_steps),
                          "tokens": sum(len(result.tokens) for result in results),
                          "acceptance": _acceptance(steps),
                          "markov_head_ms_per_block": 1000 * markov_seconds / max(len(recorded), 1)}
    walks = compare_walks(pipeline.proposer.markov_head, blocks)
    head_auc, scored, rejections = _auc(steps_of["top_k_scorer"])
    local_ids = {token: index for index, token in enumerate(vocabulary)}
    own_auc, _, _ = _auc(_draft_probabilities(steps_of["top_k_scorer"], blocks, local_ids))
    answer_tokens = sum(len(step.emitted) for step in steps_of["top_k_scorer"])
    outside = outside_tokens(steps_of["top_k_scorer"], vocabulary)
    stopped = [token for token in outside if token.stopped_acceptance]
    argmax = readings["argmax"]["tokens_per_step"]
    differ = 1 - walks["dense_equals_top_k"] / walks["positions"] if walks["positions"] else 0.0
    summary = {"argmax_last_over_first": readings["argmax"]["acceptance"]["last_over_first"],
               "walk_over_argmax": readings["top_k_scorer"]["tokens_per_step"] / argmax,
               "dense_walk_over_argmax": readings["dense_walk"]["tokens_per_step"] / argmax,
               "top_k_differs_from_dense": differ,
               "rejections": rejections, "confidence_auc": head_auc,
               "outside_share": len(outside) / answer_tokens if answer_tokens else 0.0}
    return {"pages": len(pages), "confidence_threshold": confidence_threshold,
            "precision": pipeline.inference_precision, "draft_precision": pipeline.draft_inference_precision,
            "readings": readings,
            "walks_differ": {"positions": walks["positions"], "top_k_equals_dense": walks["dense_equals_top_k"],
                             "top_k_equals_argmax": walks["top_k_equals_argmax"]},
            "confidence": {"scored_drafts": scored, "rejected_drafts": rejections, "head_auc": head_auc,
                           "draft_probability_auc": own_auc},
            "pruned_vocabulary": {"answer_tokens": answer_tokens, "outside": len(outside),
                                  "stopped_acceptance": len(stopped),
                                  "stopped_at_position": dict(sorted(Counter(t.position + 1 for t in stopped).items()))},
            "summary": summary}


def goal_lines(summary: dict) -> list[str]:
    """One line per goal: the figure, the goal, and whether it is met."""
    lines = []
    for name, (relation, bound) in GOALS.items():
        value = summary[name]
        met = value is not None and (value >= bound if relation == ">=" else
                                     value <= bound if relation == "<=" else value > bound)
        shown = "none" if value is None else f"{value:.4g}"
        lines.append(f"{name}: {shown} (goal {relation} {bound:g}): {'met' if met else 'NOT met'}")
    return lines
