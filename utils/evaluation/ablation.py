"""Ablations of the draft's choices, page by page: what the Markov walk adds over each position's own best token,
and what the confidence threshold saves.

A variant is a Markov computation and a confidence threshold. The per-position argmax is the Top-1 scorer
(`markov_head_top_k=1`): it keeps each position's best block logit `U_k`, so the Markov term `W2 @ W1[prev]`
cannot change the choice. Each variant reads every page (`repeats` times, the variants taking turns); a row
reports what is the same on every machine at f32 (drafts verified per step, tokens per step, the text, the lowest
confidence a verified draft got: a threshold below it cuts nothing) and what
the clock says (ms per generated token: median, min and max over the repeats). `compare_walks` says why two
walks agree where they do: how far each block position's best logit leads its second, on the blocks
`run_ablation` recorded (`walks=`) or `walk_margins` decodes.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD
from utils.engine.draft import PER_POSITION_ARGMAX, DSparkProposer
from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT

__all__ = ["PER_POSITION_ARGMAX", "Variant", "markov_variants", "threshold_variants", "run_ablation",
           "run_drafting_ablation", "differing_pages", "table_rows", "totals", "recording_blocks", "compare_walks",
           "walk_margins", "describe_walks", "describe_threshold"]


@dataclass(frozen=True)
class Variant:
    """One way of drafting: a Markov computation (None: the exported Top-K scorer, 0: dense) and a threshold."""

    name: str
    markov_head_top_k: int | None
    confidence_threshold: float


def markov_variants(top_k: int) -> list[Variant]:
    """Per-position argmax, the Top-K walk and the dense walk, every draft verified (threshold 0)."""
    return [Variant("per-position argmax", PER_POSITION_ARGMAX, 0.0), Variant(f"Top-{top_k} walk", None, 0.0),
            Variant("dense walk", 0, 0.0)]


def threshold_variants(default: float = DEFAULT_CONFIDENCE_THRESHOLD) -> list[Variant]:
    """The Top-K walk verifying every draft, and verifying only the confident prefix at the default threshold."""
    return [Variant("threshold 0", None, 0.0), Variant(f"threshold {default:g} (default)", None, default)]


def _row(page: str, variant: Variant, results: list) -> dict:
    metrics = results[0].metrics
    drafting = metrics.steps[1:]  # the prefill drafts nothing
    verified = sum(len(step.drafted) for step in drafting)
    ms_per_token = [1000 * result.metrics.decode_seconds / max(result.metrics.num_generated_tokens - 1, 1)
                    for result in results]
    return {"page": page, "variant": variant.name, "tokens": tuple(results[0].tokens),
            "steps": metrics.num_steps, "drafts verified": verified,
            "drafts verified per step": verified / max(len(drafting), 1),
            "tokens per step": metrics.mean_tokens_per_step,
            "lowest confidence": min((c for step in drafting for c in step.confidences or ()), default=None),
            "ms per token": statistics.median(ms_per_token), "ms per token min": min(ms_per_token),
            "ms per token max": max(ms_per_token)}


def run_ablation(pipeline, variants: Sequence[Variant], pages, *, prompt: str = DEFAULT_PROMPT,
                 max_new_tokens: int = 512, repeats: int = 1, warm_up: bool = True,
                 walks: list | None = None) -> list[dict]:
    """Reads every page with every variant (after one untimed warm-up read of each), `repeats` times, the
    variants taking turns; one row per (page, variant).

    Args:
        pipeline: a `SpeculativeOcrPipeline` with a DSpark draft.
        variants: the ways of drafting to compare.
        pages: `SamplePage`s (`.name`, `.image`).
        warm_up: read the first page once with each variant before the timed reads (False when the same
            pipeline has just read with them).
        walks: when given, the blocks the Markov head walks in the first read of each page by the exported Top-K
            walk verifying every draft are appended to it (what `compare_walks` reads: no second decoding).
    """
    if repeats < 1:
        raise ValueError(f"repeats={repeats} must be >= 1")

    def read(variant: Variant, page, record: bool = False):
        recording = recording_blocks(pipeline, walks) if record else contextlib.nullcontext()
        with recording:
            return pipeline.generate(page.image, prompt, max_new_tokens=max_new_tokens,
                                     markov_head_top_k=variant.markov_head_top_k,
                                     confidence_threshold=variant.confidence_threshold)

    recorded = next((v for v in variants if v.markov_head_top_k is None and v.confidence_threshold == 0.0), None)
    if walks is not None and recorded is None:
        raise ValueError("walks= records the exported Top-K walk verifying every draft; no variant reads with it")
    for variant in variants if warm_up else ():
        read(variant, pages[0])
    rows = []
    for page in pages:
        runs = {variant: [] for variant in variants}
        for repeat in range(repeats):
            for variant in variants:
                runs[variant].append(read(variant, page, walks is not None and repeat == 0 and variant == recorded))
        rows += [_row(page.name, variant, results) for variant, results in runs.items()]
    return rows


def run_drafting_ablation(pipeline, pages, *, top_k: int, threshold: float = DEFAULT_CONFIDENCE_THRESHOLD,
                          prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 512, warm_up: bool = True,
                          walks: list | None = None) -> tuple[list[dict], list[dict]]:
    """`markov_variants(top_k)` and `threshold_variants(threshold)` in one pass: their shared variant (the Top-K
    walk verifying every draft, "threshold 0") is read once, not twice. `warm_up` and `walks` as `run_ablation`.

    Returns:
        (rows of the Markov variants, rows of the threshold variants), as `run_ablation` gives each.
    """
    markov, thresholds = markov_variants(top_k), threshold_variants(threshold)
    shared = next(v for v in markov if (v.markov_head_top_k, v.confidence_threshold) ==
                  (thresholds[0].markov_head_top_k, thresholds[0].confidence_threshold))
    rows = run_ablation(pipeline, markov + thresholds[1:], pages, prompt=prompt,
                        max_new_tokens=max_new_tokens, warm_up=warm_up, walks=walks)
    walk_names = {variant.name for variant in markov}
    threshold_rows = [{**row, "variant": thresholds[0].name} if row["variant"] == shared.name else row
                      for row in rows if row["variant"] in {shared.name, *(v.name for v in thresholds[1:])}]
    return [row for row in rows if row["variant"] in walk_names], threshold_rows


def differing_pages(rows: list[dict]) -> list[str]:
    """Pages where the variants differ in drafts verified or tokens per step, in the order of the rows."""
    seen: dict[str, set] = {}
    for row in rows:
        seen.setdefault(row["page"], set()).add((row["drafts verified"], row["tokens per step"]))
    return [page for page, outcomes in seen.items() if len(outcomes) > 1]


def table_rows(rows: list[dict]) -> list[dict]:
    """The rows of the pages where the variants differ (`differing_pages`), or of the first page when none does,
    with the figures the same on every machine at f32, formatted for a table."""
    pages = differing_pages(rows) or [rows[0]["page"]]
    return [{"page": row["page"], "variant": row["variant"],
             "drafts verified per step": f"{row['drafts verified per step']:.2f}",
             "tokens per step": f"{row['tokens per step']:.2f}"} for row in rows if row["page"] in pages]


def totals(rows: list[dict]) -> dict[str, dict]:
    """Per variant, over all pages: drafts verified per step, tokens per step, median ms per token."""
    result = {}
    for name in dict.fromkeys(row["variant"] for row in rows):
        mine = [row for row in rows if row["variant"] == name]
        tokens = sum(len(row["tokens"]) for row in mine)
        steps = sum(row["steps"] for row in mine)
        drafting = sum(row["steps"] - 1 for row in mine)
        result[name] = {"drafts verified per step": sum(row["drafts verified"] for row in mine) / max(drafting, 1),
                        "tokens per step": tokens / steps,
                        "ms per token": statistics.median(row["ms per token"] for row in mine)}
    return result


class _RecordingHead:
    """A Markov head that keeps every block it walks: (logits, hidden, anchor, num_tokens)."""

    def __init__(self, head):
        self.head, self.info, self.clock, self.blocks = head, head.info, head.clock, []

    def walk(self, logits, hidden, *, anchor: int, num_tokens: int, top_k: int | None = None):
        self.blocks.append((logits.copy(), hidden.copy(), anchor, num_tokens))
        return self.head.walk(logits, hidden, anchor=anchor, num_tokens=num_tokens, top_k=top_k)


@contextlib.contextmanager
def recording_blocks(pipeline, blocks: list) -> Iterator[None]:
    """While open, `pipeline` drafts through a `_RecordingHead` that appends each block it walks to `blocks`."""
    proposer = pipeline.proposer
    recorder = _RecordingHead(proposer.markov_head)
    recorder.blocks = blocks
    pipeline.proposer = DSparkProposer(proposer.draft, recorder, proposer.embed, top_k=proposer.top_k)
    try:
        yield
    finally:
        pipeline.proposer = proposer


def compare_walks(head, blocks: list) -> dict:
    """Why the walks agree or not, on recorded blocks (Top-K walk, every draft verified): for each block position,
    whether the Top-K walk, the dense walk and the per-position argmax chose the same token, and the lead of the
    best block logit over the second (a Markov term smaller than it cannot change the choice).

    Args:
        head: the draft's `MarkovHead`.
        blocks: (logits, hidden, anchor, num_tokens) per block, as `run_ablation(walks=...)` records them.

    Returns:
        {"positions", "top_k_equals_argmax", "dense_equals_argmax", "dense_equals_top_k", "logit_leads"}.
    """
    same = {"top_k_equals_argmax": 0, "dense_equals_argmax": 0, "dense_equals_top_k": 0}
    leads = []
    for logits, hidden, anchor, count in blocks:
        chosen = {top_k: head.walk(logits, hidden, anchor=anchor, num_tokens=count, top_k=top_k)[0]
                  for top_k in (PER_POSITION_ARGMAX, None, 0)}
        same["top_k_equals_argmax"] += int((chosen[None] == chosen[PER_POSITION_ARGMAX]).sum())
        same["dense_equals_argmax"] += int((chosen[0] == chosen[PER_POSITION_ARGMAX]).sum())
        same["dense_equals_top_k"] += int((chosen[0] == chosen[None]).sum())
        best_two = np.sort(logits[:count], axis=-1)[:, -2:]
        leads += (best_two[:, 1] - best_two[:, 0]).tolist()
    return {"positions": len(leads), **same, "logit_leads": leads}


def walk_margins(pipeline, pages, *, prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 512) -> dict:
    """`compare_walks` on the blocks of the pages' runs (Top-K walk, every draft verified), decoded here.

    Args:
        pipeline: a `SpeculativeOcrPipeline` with a DSpark draft.
    """
    blocks: list = []
    with recording_blocks(pipeline, blocks):
        for page in pages:
            pipeline.generate(page.image, prompt, max_new_tokens=max_new_tokens, confidence_threshold=0.0)
    return compare_walks(pipeline.proposer.markov_head, blocks)


def _differences(rows: list[dict]) -> str:
    pages = differing_pages(rows)
    count = len(dict.fromkeys(row["page"] for row in rows))
    if not pages:
        return f"No difference on any of the {count} pages"
    return f"They differ on {len(pages)} of {count} pages ({', '.join(pages)})"


def describe_walks(rows: list[dict], margins: dict) -> str:
    """What the Markov walk changed, in one paragraph of Markdown built from `run_ablation` rows (markov_variants)
    and `walk_margins` on the same pages."""
    summary = totals(rows)
    figures = "; ".join(f"{name}: {values['tokens per step']:.2f} tokens per step" for name, values in summary.items())
    leads = np.asarray(margins["logit_leads"]) if margins["logit_leads"] else np.zeros(1)
    return (f"{_differences(rows)}. Over all pages, {figures}. Why: the Top-K walk kept each position's own best "
            f"block logit at {margins['top_k_equals_argmax']} of {margins['positions']} drafted positions, and the "
            f"dense walk chose as the Top-K walk at {margins['dense_equals_top_k']} of {margins['positions']}. The "
            f"best block logit led the second by {np.median(leads):.2f} (median) and {leads.min():.2f} at the "
            f"least: the Markov term `W2 @ W1[prev]` changes a choice only where it outweighs that lead.")


def describe_threshold(rows: list[dict], threshold: float) -> str:
    """What the confidence threshold changed, in one paragraph of Markdown built from `run_ablation` rows
    (threshold_variants)."""
    summary = totals(rows)
    figures = "; ".join(f"{name}: {values['drafts verified per step']:.2f} drafts verified per step, "
                        f"{values['tokens per step']:.2f} tokens per step" for name, values in summary.items())
    lowest = min((row["lowest confidence"] for row in rows if row["lowest confidence"] is not None), default=None)
    why = ("no draft has a confidence" if lowest is None else
           f"the lowest confidence of any draft verified at threshold 0 was {lowest:.2f}, "
           f"{'below' if lowest < threshold else 'above'} the threshold {threshold:g}")
    return f"{_differences(rows)}. Over all pages, {figures}. Why: {why}."
