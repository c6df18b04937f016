"""Speculative decoding against the target alone at real size on a CPU: draft settings and the confident prefix.

One run, configurations interleaved (rounds rotate their order, so drift of the shared CPU hits all alike),
with the random real-size pair of `benchmarks.engine_efficiency` (int8 target at f32, the reference
precision, so every run's tokens must equal the target-only tokens, or the script stops):

1. Draft settings at forced acceptance, upstream's 5.47 tokens per step, 15 drafts verified per step:
   `DRAFT_SETTINGS` (exported weight format x the draft's compile precision; the target's never changes).
2. The confident prefix: acceptance and confidences replayed from recorded runs of the distilled tiny pair
   (`record_tiny_pair_steps`: per step, how many drafts the target accepted and the draft's confidence at
   each position), 15 drafts per step (fixed, threshold 0) against thresholds that verify only the confident prefix.
   The language-model IR takes any length, so a shorter verification costs less.

    python -m benchmarks.cpu_speedup [--contexts 1024 3072] [--thresholds 0 0.3 0.5 0.7 0.9] [--json FILE]

Artefacts are cached in --work and shared with `benchmarks.engine_efficiency` (the first run builds them:
~10 min and ~11 GB of peak memory on the 2-core machine).
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from benchmarks.engine_efficiency import (BLOCK_SIZE, EMBEDDINGS_FILE, VERIFY_LENGTH, ForcedAcceptanceProposer,
                                          StepCounters, TableEmbeddings, check_invariant, in_round_order,
                                          prepare_draft, prepare_target, summarize, tau_schedule)
from utils.cli import add_json_option, command_parser, float_between, int_at_least, write_json
from utils.engine.decoder import SpeculativeDecoder
from utils.engine.device import compile_properties, inference_precision
from utils.engine.draft import DSparkProposer
from utils.engine.language_model import LanguageModelSession

__all__ = ["DRAFT_SETTINGS", "RecordedStep", "record_tiny_pair_steps", "replay_schedule", "main"]

# name -> (the draft IR's weight format, the draft's compile precision): "default" is the device's own (bf16 on
# this CPU, with dynamic activation quantization for int8/int4 weights).
DRAFT_SETTINGS = {"fp32": ("fp32", "f32"), "bf16": ("fp32", "default"), "int8": ("int8", "default"),
                  "int4": ("int4", "default")}
UPSTREAM_TAU = 5.47  # the seed's tokens per step of the real pair (Arc B390)


@dataclass(frozen=True)
class RecordedStep:
    """One speculative step of a recorded run: leading drafts the target accepted, the draft's confidences."""

    accepted: int
    confidences: tuple[float, ...]


def record_tiny_pair_steps(*, max_new_tokens: int = 64) -> list[RecordedStep]:
    """The steps of the shipped distilled tiny pair on the sample pages, both prompts, all drafts verified (f32).

    The last step of each answer is left out (EOS or the budget may cut it, hiding how many drafts matched).
    """
    from utils.evaluation.pages import SAMPLE_PROMPTS, sample_pages
    from utils.models import default_ir_pair
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    pipeline = SpeculativeOcrPipeline(*default_ir_pair(), device="CPU", precision="f32", draft_precision="f32")
    steps = []
    for page in sample_pages():
        for prompt in SAMPLE_PROMPTS:
            result = pipeline.generate(page.image, prompt, max_new_tokens=max_new_tokens)
            steps += [RecordedStep(step.matched_drafts, step.confidences) for step in result.metrics.steps[1:-1]]
    return steps


def replay_schedule(steps: list[RecordedStep]):
    """step -> (drafts to accept, confidences): the recorded steps in order, over and over."""
    return lambda index: (steps[index % len(steps)].accepted, steps[index % len(steps)].confidences)


def _decoders(language_model, embed, drafts: dict, reference: list[int], *, vocab_size: int, replay_draft: str,
              recorded: list[RecordedStep], thresholds: list[float]) -> dict:
    """name -> (StepCounters, confidence threshold) of every configuration of one context."""
    def speculative(draft, schedule):
        proposer = ForcedAcceptanceProposer(draft, reference, schedule=schedule, vocab_size=vocab_size)
        return StepCounters(SpeculativeDecoder(language_model, embed, stop_token_ids=(), proposer=proposer,
                                               block_size=BLOCK_SIZE))

    configs = {"target only": (StepCounters(SpeculativeDecoder(language_model, embed, stop_token_ids=())), 0.0)}
    for name, draft in drafts.items():
        configs[f"draft {name}"] = (speculative(draft, tau_schedule(UPSTREAM_TAU)), 0.0)
    for threshold in thresholds:
        configs[f"replay, threshold {threshold:g}"] = (speculative(drafts[replay_draft], replay_schedule(recorded)),
                                                       threshold)
    return configs


def measure(language_model, embed, drafts: dict, recorded: list[RecordedStep], *, contexts: list[int],
            thresholds: list[float], replay_draft: str, new_tokens: int, rounds: int, seed: int) -> dict:
    """Interleaved runs of every configuration at every context; raw per-step counters per (context, name)."""
    rng = np.random.default_rng(seed)
    vocab_size = embed.table.shape[0]
    setups = {}
    for context in contexts:
        context_embeds = embed(rng.integers(vocab_size, size=context))
        reference, _, _ = StepCounters(SpeculativeDecoder(language_model, embed, stop_token_ids=())).run(
            context_embeds, new_tokens + VERIFY_LENGTH)
        configs = _decoders(language_model, embed, drafts, reference, vocab_size=vocab_size,
                            replay_draft=replay_draft, recorded=recorded, thresholds=thresholds)
        for counters, threshold in configs.values():  # warm-up: every compiled shape once
            counters.run(context_embeds, 2 * VERIFY_LENGTH, confidence_threshold=threshold)
        setups[context] = (context_embeds, reference, configs)
    raw = {}
    for round_index in range(rounds):
        for context, (context_embeds, reference, configs) in setups.items():
            for name in in_round_order(list(configs), round_index):
                counters, threshold = configs[name]
                tokens, steps, seconds = counters.run(context_embeds, new_tokens, confidence_threshold=threshold)
                check_invariant(tokens, reference, label=f"context {context}, {name}, round {round_index}", strict=True)
                record = raw.setdefault((context, name), {"steps": [], "verified": [], "decode_s": []})
                first = 0 if name == "target only" else 1  # the first speculative step ingests the context
                record["steps"] += steps[first:]
                record["verified"] += [len(step.drafted) for step in counters.last_steps[1 + first:]]
                record["decode_s"].append(seconds)
                print(f"  round {round_index} context {context} {name}: {seconds:.2f} s", flush=True)
    return raw


def report_rows(raw: dict, *, contexts: list[int]) -> list[dict]:
    """One row per (context, configuration): per-step times, shares and speedups."""
    rows = []
    for context in contexts:
        baseline = summarize(raw[(context, "target only")]["steps"])
        names = [name for (c, name) in raw if c == context]
        for name in names:
            record = raw[(context, name)]
            summary = summarize(record["steps"])
            wall_ms = 1000 * statistics.fmean(step["wall"] for step in record["steps"])
            rows.append({
                "context": context, "configuration": name, "tokens_per_step": summary["tau"],
                "tokens_per_s": summary["tokens_per_s"], "speedup": summary["tokens_per_s"] / baseline["tokens_per_s"],
                "step_ms": wall_ms, "t_target_ms": summary["target_ms"], "t_draft_ms": summary["draft_ms"],
                "t_markov_ms": summary["markov_ms"], "host_ms": summary["host_ms"],
                "markov_share": summary["markov_ms"] / wall_ms, "host_share": summary["host_ms"] / wall_ms,
                "verified_per_step": statistics.fmean(record["verified"]) if record["verified"] else 0.0,
            })
    return rows


def print_tables(rows: list[dict]) -> None:
    print("\n| context | configuration | tokens/step | drafts verified | step (ms) | target (ms) | draft (ms) "
          "| Markov (ms) | host (ms) | Markov share | host share | tok/s | speedup |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['context']} | {row['configuration']} | {row['tokens_per_step']:.2f} "
              f"| {row['verified_per_step']:.1f} | {row['step_ms']:.1f} | {row['t_target_ms']:.1f} "
              f"| {row['t_draft_ms']:.1f} | {row['t_markov_ms']:.2f} | {row['host_ms']:.1f} "
              f"| {row['markov_share']:.1%} | {row['host_share']:.1%} | {row['tokens_per_s']:.1f} "
              f"| {row['speedup']:.2f}x |")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser("benchmarks.cpu_speedup", __doc__)
    parser.add_argument("--work", metavar="DIR", type=Path, default=Path("/tmp/dspark-engine-bench"),
                        help="cache folder for the random models and their IRs (shared with engine_efficiency)")
    parser.add_argument("--contexts", metavar="N", type=int_at_least(1), nargs="+", default=[1024, 3072],
                        help="context tokens")
    parser.add_argument("--drafts", nargs="+", default=list(DRAFT_SETTINGS), choices=list(DRAFT_SETTINGS),
                        help="draft settings at forced acceptance (weight format x compile precision)")
    parser.add_argument("--thresholds", metavar="P", type=float_between(0.0, 1.0), nargs="+",
                        default=[0.0, 0.3, 0.5, 0.7, 0.9],
                        help="confidence thresholds of the replayed runs, 0 to 1 (0: all 15 drafts verified)")
    parser.add_argument("--replay-draft", default="int8", choices=list(DRAFT_SETTINGS),
                        help="the draft setting the replayed runs pay for")
    parser.add_argument("--new-tokens", metavar="N", type=int_at_least(1), default=128, help="tokens generated per run")
    parser.add_argument("--rounds", metavar="N", type=int_at_least(1), default=2,
                        help="interleaved repetitions of every configuration")
    parser.add_argument("--seed", metavar="N", type=int_at_least(0), default=0, help="seed of the random contexts")
    add_json_option(parser, what="the settings, recorded steps and rows")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Builds or reuses the artefacts, records the tiny pair's steps, measures, prints the table."""
    args = _parse_args(argv)
    recorded = record_tiny_pair_steps()
    print(f"recorded {len(recorded)} steps of the tiny pair: {statistics.fmean(s.accepted for s in recorded) + 1:.2f} "
          f"tokens per step", flush=True)
    target = prepare_target(args.work, "int8")
    properties = compile_properties("CPU", precision="f32")
    embed = TableEmbeddings(np.load(target / EMBEDDINGS_FILE, mmap_mode="r"))
    language_model = LanguageModelSession(target, properties=properties,
                                          max_length=max(args.contexts) + args.new_tokens + 4 * VERIFY_LENGTH)
    drafts, precisions = {}, {}
    for name in dict.fromkeys([*args.drafts, args.replay_draft]):
        weight_format, precision = DRAFT_SETTINGS[name]
        drafts[name] = DSparkProposer.load(prepare_draft(args.work, weight_format), "CPU",
                                           properties=compile_properties("CPU", precision=precision), embed=embed)
        precisions[name] = inference_precision(drafts[name].draft.compiled)
    print(f"draft settings (inference precision): {precisions}; {args.new_tokens} tokens per run, "
          f"{args.rounds} rounds", flush=True)
    raw = measure(language_model, embed, drafts, recorded, contexts=args.contexts, thresholds=args.thresholds,
                  replay_draft=args.replay_draft, new_tokens=args.new_tokens, rounds=args.rounds, seed=args.seed)
    rows = report_rows(raw, contexts=args.contexts)
    print_tables(rows)
    if args.json:
        settings = {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()}
        write_json(args.json, {"settings": settings, "draft_inference_precision": precisions,
                               "recorded_steps": [asdict(step) for step in recorded], "rows": rows})


if __name__ == "__main__":
    main()
