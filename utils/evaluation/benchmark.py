"""Acceptance and throughput study: target-only vs speculative decoding over the sample pages.

Every configuration (target only; each draft x Markov computation x num_assistant_tokens) first reads one
page untimed (warm-up: the first inferences of a compiled model pay one-off costs), then every page,
`repeats` times. The configurations take turns page by page, so the machine's drift hits all of them alike;
each page's time is the median of its repeats (`decode_tokens_per_s` pools those median runs), and speedups are
ratios measured in the same run: decode tokens/s of a configuration over that of the target alone, as in notebook
05. Each configuration keeps the speedup of every repeat (all pages pooled, against the target alone in the same
repeat); its `speedup` is their median and their min and max show the spread: one estimator for both. `markdown_report` prints a table of the shape of the seed PR's validation table. The command
line is `python -m utils.bench`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD
from utils.engine.timing import STAGES
from utils.engine.verification import mean_tokens_per_step
from utils.evaluation.acceptance import (conditional_acceptance, confidence_auc, reliability_bins, replay_threshold,
                                         scored_positions, tokens_per_step_histogram)
from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT

__all__ = ["SCHEMA_VERSION", "THRESHOLD_SWEEP", "BenchConfig", "summarize", "run_benchmark", "markdown_report",
           "configurations", "threshold_sweep_times"]

SCHEMA_VERSION = 5  # 4: configuration names say "N drafts"; speedup_by_repeat; confidence.default_threshold
# 5: confidence.threshold_sweep
THRESHOLD_SWEEP = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)  # replayed on every configuration


@dataclass(frozen=True)
class BenchConfig:
    """One configuration: a draft folder (None = target only), the Markov computation and the drafts per step."""

    draft: Path | None
    markov_head_top_k: int | None = None  # None: the draft's Top-K scorer; 0: dense walk
    num_assistant_tokens: int | None = None  # None: the draft's block size

    @property
    def name(self) -> str:
        if self.draft is None:
            return "target only"
        walk = "dense walk" if self.markov_head_top_k == 0 else "Top-K scorer"
        tokens = "" if self.num_assistant_tokens is None else f", {self.num_assistant_tokens} drafts"
        return f"{self.draft.name}, {walk}{tokens}"


def summarize(runs: list[dict]) -> dict:
    """Pools the runs of one configuration: each run is {"steps": [StepRecord], "decode_seconds", "stages"...}.

    Returns the JSON-ready summary (without the speedup, which needs the baseline).
    """
    steps = [step for run in runs for step in run["steps"]]
    decode_tokens = sum(run["tokens"] - 1 for run in runs)
    decode_seconds = sum(run["decode_seconds"] for run in runs)
    scores, accepted = scored_positions(steps)
    stages = {stage: sum(run["stages"].get(stage, 0.0) for run in runs) for stage in (*STAGES, "other")}
    return {
        "pages": len(runs),
        "generated_tokens": sum(run["tokens"] for run in runs),
        "decode_tokens_per_s": decode_tokens / decode_seconds if decode_seconds else 0.0,
        "mean_tokens_per_step": mean_tokens_per_step(steps),
        "tokens_per_step_histogram": tokens_per_step_histogram(steps),
        "conditional_acceptance": conditional_acceptance(steps),
        "time_breakdown_s": stages,
        "confidence": {"auc": confidence_auc(scores, accepted), "reliability": reliability_bins(scores, accepted),
                       "scores": scores, "accepted": accepted,
                       "default_threshold": replay_threshold(steps, DEFAULT_CONFIDENCE_THRESHOLD),
                       "threshold_sweep": [replay_threshold(steps, threshold) for threshold in THRESHOLD_SWEEP]},
    }


def _run_record(result) -> dict:
    metrics = result.metrics
    return {"steps": metrics.steps, "tokens": metrics.num_generated_tokens, "decode_seconds": metrics.decode_seconds,
            "stages": metrics.time_breakdown, "text": result.texts[0]}


def _median_run(repeats: list[dict]) -> dict:
    """One page's record: the (deterministic) tokens and steps of its runs, the median of their times."""
    stages = {stage: statistics.median(run["stages"].get(stage, 0.0) for run in repeats)
              for stage in repeats[0]["stages"]}
    return repeats[0] | {"decode_seconds": statistics.median(run["decode_seconds"] for run in repeats),
                         "stages": stages}


def run_benchmark(target: Path, configs: list[BenchConfig], pages, *, prompt: str = DEFAULT_PROMPT,
                  max_new_tokens: int = 128, repeats: int = 1, device: str | None = None,
                  precision: str = "default", draft_precision: str = "default",
                  confidence_threshold: float = DEFAULT_CONFIDENCE_THRESHOLD, progress: bool = True) -> dict:
    """Warms every configuration up, runs it on every page `repeats` times, interleaved, and returns the
    results document.

    The first configuration must be target only: it is the baseline of every speedup, and the invariant
    (speculative output = target-only output) is checked on every page and repeat. `precision` is the
    target's, `draft_precision` the draft's (acceptance figures are the same on every machine at "f32");
    `confidence_threshold` 0 verifies every draft (what a calibration study needs).
    """
    from tqdm.auto import tqdm

    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    if not configs or configs[0].draft is not None:
        raise ValueError("the first configuration must be target only (draft=None): it is the baseline")
    if repeats < 1:
        raise ValueError(f"repeats={repeats} must be >= 1")
    pipelines = {config.draft: None for config in configs}
    for draft in pipelines:
        pipelines[draft] = SpeculativeOcrPipeline(target, draft, device=device, precision=precision,
                                                  draft_precision=draft_precision)

    def run(config: BenchConfig, page):
        options = {} if config.draft is None else {"num_assistant_tokens": config.num_assistant_tokens,
                                                    "markov_head_top_k": config.markov_head_top_k,
                                                    "confidence_threshold": confidence_threshold}
        return pipelines[config.draft].generate(page.image, prompt, max_new_tokens=max_new_tokens, **options)

    for config in configs:
        run(config, pages[0])  # warm-up, untimed
    records = {config.name: [[] for _ in pages] for config in configs}
    mismatches = []
    with tqdm(total=repeats * len(pages), desc="pages", disable=not progress) as bar:
        for repeat in range(repeats):
            for index, page in enumerate(pages):
                baseline_tokens = None
                for config in configs:
                    result = run(config, page)
                    records[config.name][index].append(_run_record(result))
                    baseline_tokens = baseline_tokens or result.tokens
                    if result.tokens != baseline_tokens:
                        mismatches.append({"page": page.name, "repeat": repeat, "config": config.name})
                bar.update()
    summaries = {name: summarize([_median_run(page_runs) for page_runs in per_page])
                 for name, per_page in records.items()}
    baseline = summaries[configs[0].name]["decode_tokens_per_s"]
    for name, summary in summaries.items():
        summary["speedup_by_repeat"] = [_pooled_rate(records[name], repeat) / _pooled_rate(records[configs[0].name],
                                                                                          repeat)
                                        for repeat in range(repeats)]
        # One estimator for the speedup and its spread: the median repeat, inside its min-to-max by construction
        # (the ratio of the pooled median-run rates below can fall outside it).
        summary["speedup"] = statistics.median(summary["speedup_by_repeat"])
    inference = next(iter(pipelines.values())).inference_precision
    settings = {"schema_version": SCHEMA_VERSION, "target": str(target), "device": device, "precision": precision,
                "inference_precision": inference, "draft_precision": draft_precision,
                "confidence_threshold": confidence_threshold, "repeats": repeats, "max_new_tokens": max_new_tokens,
                "pages": [page.name for page in pages], "output_mismatches": mismatches}
    configurations = [{"name": config.name, "draft": None if config.draft is None else str(config.draft),
                       "markov_head_top_k": config.markov_head_top_k,
                       "num_assistant_tokens": config.num_assistant_tokens, **summaries[config.name]}
                      for config in configs]
    return _without_nan(settings | {"configurations": configurations})


def threshold_sweep_times(results: dict, name: str, sweep: list[str]) -> list[float]:
    """Milliseconds per decoded token each threshold of `name`'s replayed sweep would take, estimated from this
    run's own stage times.

    A drafting step costs `name`'s draft, Markov head and host time per step, which the threshold does not change,
    plus a verification, whose cost grows with the drafts it verifies: a line fitted through the verification time
    per step of the configurations in `sweep` (the same draft, fewer drafts per step, every draft verified)
    against their drafts verified per step. Each threshold's step then costs that at its own drafts verified, over
    its own tokens per step. One value per row of `name`'s `confidence.threshold_sweep`.
    """
    configs = {config["name"]: config for config in results["configurations"]}

    def per_step(config: dict) -> tuple[float, float]:
        everything = config["confidence"]["threshold_sweep"][0]  # threshold 0: every draft verified
        steps = everything["steps"]
        return everything["drafts verified"] / steps, 1000 * config["time_breakdown_s"]["verification"] / steps

    points = np.array([per_step(configs[sweep_name]) for sweep_name in sweep])
    if len(np.unique(points[:, 0])) < 2:
        raise ValueError(f"{sweep} verify {sorted(set(points[:, 0]))} drafts per step: a line needs two counts")
    slope, intercept = np.polyfit(points[:, 0], points[:, 1], 1)
    config = configs[name]
    rows = config["confidence"]["threshold_sweep"]
    stages = config["time_breakdown_s"]
    fixed = 1000 * (stages["draft"] + stages["markov_head"] + stages["other"]) / rows[0]["steps"]
    return [(fixed + intercept + slope * row["drafts verified at threshold"] / row["steps"])
            / (1 + row["accepted drafts at threshold"] / row["steps"]) for row in rows]


def _pooled_rate(per_page: list[list[dict]], repeat: int) -> float:
    """Decode tokens/s of one repeat, all pages pooled."""
    runs = [page_runs[repeat] for page_runs in per_page]
    seconds = sum(run["decode_seconds"] for run in runs)
    return sum(run["tokens"] - 1 for run in runs) / seconds if seconds else float("nan")


def markdown_report(results: dict) -> str:
    """The seed PR's table: draft weights, Markov head, drafts per step, decode tok/s, speedup (with its spread
    over the repeats), tokens per step."""
    lines = ["| Draft | Markov head | Drafts per step | Decode tok/s (median runs) | Speedup (median repeat) | "
             "Speedup min to max over repeats | "
             "Tokens per step |", "|---|---|---|---|---|---|---|"]
    for config in results["configurations"]:
        if config["draft"] is None:
            lines.append(f"| (target alone) | | | {config['decode_tokens_per_s']:.1f} | 1.00x | | |")
            continue
        walk = "dense walk (top_k=0)" if config["markov_head_top_k"] == 0 else "Top-K scorer"
        drafts = config["num_assistant_tokens"] or "block"
        spread = config.get("speedup_by_repeat") or [config["speedup"]]
        lines.append(f"| {Path(config['draft']).name} | {walk} | {drafts} | {config['decode_tokens_per_s']:.1f} | "
                     f"{config['speedup']:.2f}x | {min(spread):.2f}x to {max(spread):.2f}x | "
                     f"{config['mean_tokens_per_step']:.2f} |")
    return "\n".join(lines)


def _without_nan(value):
    """JSON has no NaN: undefined rates (nothing reached, empty bins) become null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _without_nan(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_nan(item) for item in value]
    return value


def configurations(drafts: list[Path], *, num_assistant_tokens: list[int | None], dense: bool) -> list[BenchConfig]:
    """Target only, then each draft at each `num_assistant_tokens` (and the dense walk at the first, if `dense`)."""
    configs = [BenchConfig(None)]
    for draft in drafts:
        for tokens in num_assistant_tokens:
            configs.append(BenchConfig(draft, None, tokens))
        if dense:
            configs.append(BenchConfig(draft, 0, num_assistant_tokens[0]))
    return configs
