"""Target-only and speculative decoding of the same page, side by side: metrics, and where precision moves a token."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from utils.pipeline.speculative_ocr import OcrResult

__all__ = ["compare_runs", "metrics_rows", "first_difference", "top2_margin", "precision_study"]


def compare_runs(baseline, speculative, image, prompt: str, *, max_new_tokens: int = 512, **options
                 ) -> dict[str, OcrResult]:
    """Runs the baseline (no draft) first, then speculative decoding, on the same image and prompt.

    Args:
        baseline: a `SpeculativeOcrPipeline` without a draft.
        speculative: one with the draft.
        options: passed to `speculative.generate` (num_assistant_tokens, markov_head_top_k, streamer, ...).
    """
    return {
        "target only": baseline.generate(image, prompt, max_new_tokens=max_new_tokens),
        "speculative": speculative.generate(image, prompt, max_new_tokens=max_new_tokens, **options),
    }


def metrics_rows(results: dict[str, OcrResult]) -> list[dict]:
    """One row per run: tokens, steps, tokens/step, decode tokens/s, TTFT, speedup vs the first run."""
    rows, reference = [], None
    for name, result in results.items():
        metrics = result.metrics
        reference = reference or metrics.decode_tokens_per_s
        rows.append({
            "run": name,
            "tokens": metrics.num_generated_tokens,
            "steps": metrics.num_steps,
            "tokens/step": f"{metrics.mean_tokens_per_step:.2f}",
            "decode tok/s": f"{metrics.decode_tokens_per_s:.1f}",
            "speedup": f"{metrics.decode_tokens_per_s / reference:.2f}x",
            "TTFT ms": f"{metrics.ttft * 1000:.0f}",
            **{f"{stage} ms": f"{seconds * 1000:.0f}" for stage, seconds in metrics.time_breakdown.items()},
        })
    return rows


def first_difference(tokens: Sequence, reference: Sequence) -> int | None:
    """Index of the first item (token, character) where two sequences differ (a length difference counts); None
    if they are equal."""
    for index, (a, b) in enumerate(zip(tokens, reference)):
        if a != b:
            return index
    return None if len(tokens) == len(reference) else min(len(tokens), len(reference))


def top2_margin(pipeline, image, prompt: str, prefix: list[int]) -> float:
    """The target's logit gap between its best and second-best token after `prompt` and `prefix`.

    A small gap is a near-tie: a rounding change (another precision, another block length) can swap the two.
    """
    session = pipeline.language_model
    session.reset()
    logits, _ = session.prefill(pipeline.prompt_embeddings(image, prompt))
    for token in prefix:
        logits, _ = session.decode_one(pipeline.embed(np.array([[token]], np.int64))[0, 0])
    best, second = np.sort(logits)[-2:][::-1]
    return float(best - second)


def precision_study(pipelines: dict[str, tuple], exact_baseline, cases, *, max_new_tokens: int = 512,
                    exact_tokens: dict[str, Sequence[int]] | None = None) -> list[dict]:
    """Speculative vs target-only output at each precision, case by case, and the target's own text against f32.

    Args:
        pipelines: precision -> (target-only pipeline, speculative pipeline) at that precision.
        exact_baseline: a target-only pipeline at f32: the target's exact text, and the margin at each first
            difference.
        cases: (name, image, prompt) triples.
        exact_tokens: the f32 target's text of some cases, by name, when already known (it is not read again).

    Returns:
        One row per (case, precision): whether the speculative text is the target-only text at that precision
        ("identical"), the first differing token and the f32 top-2 margin there (None when identical), and whether
        the target-only text at that precision is its f32 text ("target as at f32": rounding can change the
        target's own reading, draft or no draft).
    """
    rows = []
    for name, image, prompt in cases:
        known = (exact_tokens or {}).get(name)
        exact = list(known) if known is not None else exact_baseline.generate(image, prompt,
                                                                              max_new_tokens=max_new_tokens).tokens
        for precision, (alone, speculative) in pipelines.items():
            reference = exact if alone is exact_baseline else alone.generate(image, prompt,
                                                                             max_new_tokens=max_new_tokens).tokens
            tokens = speculative.generate(image, prompt, max_new_tokens=max_new_tokens).tokens
            index = first_difference(tokens, reference)
            margin = None if index is None else top2_margin(exact_baseline, image, prompt, reference[:index])
            rows.append({"case": name, "precision": precision, "identical": index is None,
                         "first difference": index, "f32 top-2 margin": margin, "target as at f32": reference == exact})
    return rows
