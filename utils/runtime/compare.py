"""Target-only and speculative decoding of the same page, side by side (the notebooks' metrics panel)."""

from __future__ import annotations

from utils.runtime.metrics import OcrResult

__all__ = ["compare_runs", "metrics_rows"]


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
