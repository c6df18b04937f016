"""Speculative decoding against the target alone at real size on a CPU: target precision, draft settings, the
confident prefix, and the memory roofline.

One run, configurations interleaved (rounds rotate their order, so drift of the shared CPU hits all alike),
with the random real-size pair of `benchmarks.harness`, the target sharpened to trained-like margins
(`benchmarks.real_size_model.sharpen_margins`, `--input-scale`; `benchmarks.margins` measures them). The target
(int8 weights) runs at each of `--precisions`: at f32, the reference precision, every run's tokens must equal
the target-only tokens, or the script stops; at the device's default (bf16 on this CPU) a block and single
tokens round differently, so each row reports its agreement with target-only decoding at that precision: the
share of tokens before the first difference, and where the first differences fell (position, and the
target-only step's margin there over the logits' spread).

1. Draft settings at forced acceptance, upstream's 5.47 tokens per step, 15 drafts verified per step:
   `DRAFT_SETTINGS` (exported weight format x the draft's compile precision).
2. The confident prefix: acceptance and confidences replayed from recorded runs of the distilled tiny pair
   (`record_tiny_pair_steps`: per step, how many drafts the target accepted and the draft's confidence at
   each position), 15 drafts per step (fixed, threshold 0) against thresholds that verify only the confident prefix.
   The language-model IR takes any length, so a shorter verification costs less. And the cost-aware prefix
   (`COST_AWARE`, `utils.engine.step_cost`): every draft's confidence against this device's `StepCost`, measured
   per context and target precision before the runs (a target-only run and a run verifying every draft) and
   printed as the `--step-cost` values of `utils.ocr`.
3. A roofline line per context and target precision: the bytes a decode step reads (`benchmarks.roofline`:
   weights, K/V cache, linear-attention states) over this machine's read bandwidth, measured in numpy before
   and after the run (the faster of the two counts), against the measured target-only step.

    python -m benchmarks.cpu_speedup [--contexts 1024 3072] [--precisions f32 default]
                                     [--thresholds 0 0.3 0.5 0.7 0.9] [--json FILE]

Artefacts are cached in --work and shared with the other benchmarks (`benchmarks.harness`; the first run builds them:
~10 min and ~11 GB of peak memory on the 2-core machine).
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from benchmarks.engine_efficiency import check_invariant
from benchmarks.harness import (BLOCK_SIZE, WARM_UP_CONTEXT, TableEmbeddings, add_contexts_option, add_run_options,
                                add_work_option, interleaved_rounds, prepare_draft, prepare_target)
from benchmarks.margins import LogitRecorder, top_margins
from benchmarks.real_size_model import VERIFY_LENGTH
from benchmarks.roofline import bytes_per_token, memory_bandwidth, roofline_row, weight_bytes
from benchmarks.stand_ins import ForcedAcceptanceProposer, StepCounters, summarize, tau_schedule
from utils.cli import add_json_option, command_parser, float_between, write_json
from utils.contract import LANGUAGE_MODEL_NAME
from utils.engine.decoder import SpeculativeDecoder
from utils.engine.device import PRECISIONS, compile_properties, inference_precision
from utils.engine.draft import DSparkProposer
from utils.engine.language_model import LanguageModelSession
from utils.engine.step_cost import StepCost
from utils.evaluation.compare import first_difference
from utils.notebook.display import markdown_table

__all__ = ["DRAFT_SETTINGS", "INPUT_SCALE", "COST_AWARE", "RecordedStep", "PrefillOnce", "greedy_reference",
           "measure_step_cost", "record_tiny_pair_steps", "replay_schedule", "report_rows", "roofline_rows", "main"]

# name -> (the draft IR's weight format, the draft's compile precision): "default" is the device's own (bf16 on
# this CPU, with dynamic activation quantization for int8/int4 weights).
DRAFT_SETTINGS = {"fp32": ("fp32", "f32"), "bf16": ("fp32", "default"), "int8": ("int8", "default"),
                  "int4": ("int4", "default"), "int4-f32": ("int4", "f32")}  # int4-f32: a CPU without bf16
UPSTREAM_TAU = 5.47  # the seed's tokens per step of the real pair (Arc B390)
INPUT_SCALE = 16.0  # sharpen_margins: margins like a confident reader's (docs/performance.md)
TARGET_ONLY = "target only"
COST_AWARE = "replay, cost-aware"  # threshold 0, then the prefix with the most expected tokens per ms (StepCost)
@dataclass(frozen=True)
class RecordedStep:
    """One speculative step of a recorded run: leading drafts the target accepted, the draft's confidences."""

    accepted: int
    confidences: tuple[float, ...]


def record_tiny_pair_steps(*, max_new_tokens: int = 64) -> list[RecordedStep]:
    """The steps of the shipped distilled tiny pair on the sample pages, all drafts verified (f32), with the prompt
    its draft was distilled for (the CLI's default, `READING_DISTILL`).

    Not the second sample prompt: the shipped draft drafts 1.1 tokens per step there (`docs/tiny-pair.md`), and a
    budget of tokens takes six times as many steps at that rate, so its steps would be most of the recording. The
    last step of each answer is left out (EOS or the budget may cut it, hiding how many drafts matched).
    """
    from utils.pages.reading_pages import sample_pages
    from utils.models import default_ir_pair
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline
    from utils.tiny.config import READING_DISTILL

    pipeline = SpeculativeOcrPipeline(*default_ir_pair(), device="CPU", precision="f32", draft_precision="f32")
    steps = []
    for page in sample_pages():
        for prompt in READING_DISTILL["prompts"]:
            result = pipeline.generate(page.image, prompt, max_new_tokens=max_new_tokens)
            steps += [RecordedStep(step.matched_drafts, step.confidences) for step in result.metrics.steps[1:-1]]
    return steps


def replay_schedule(steps: list[RecordedStep]):
    """step -> (drafts to accept, confidences): the recorded steps in order, over and over."""
    return lambda index: (steps[index % len(steps)].accepted, steps[index % len(steps)].confidences)


def _decoders(language_model, embed, drafts: dict, reference: list[int], *, vocab_size: int, replay_draft: str,
              recorded: list[RecordedStep], thresholds: list[float], step_cost: StepCost | None = None) -> dict:
    """name -> (StepCounters, confidence threshold, step cost) of every configuration of one context and target
    precision; with `step_cost`, also the replay that verifies the cost-aware prefix (`COST_AWARE`)."""
    def speculative(draft, schedule):
        proposer = ForcedAcceptanceProposer(draft, reference, schedule=schedule, vocab_size=vocab_size)
        return StepCounters(SpeculativeDecoder(language_model, embed, stop_token_ids=(), proposer=proposer,
                                               block_size=BLOCK_SIZE))

    configs = {TARGET_ONLY: (StepCounters(SpeculativeDecoder(language_model, embed, stop_token_ids=())), 0.0, None)}
    for name, draft in drafts.items():
        configs[f"draft {name}"] = (speculative(draft, tau_schedule(UPSTREAM_TAU)), 0.0, None)
    for threshold in thresholds:
        configs[f"replay, threshold {threshold:g}"] = (speculative(drafts[replay_draft], replay_schedule(recorded)),
                                                       threshold, None)
    if step_cost is not None:
        configs[COST_AWARE] = (speculative(drafts[replay_draft], replay_schedule(recorded)), 0.0, step_cost)
    return configs


def measure_step_cost(configs: dict, draft_name: str, context_embeds: np.ndarray, new_tokens: int) -> StepCost:
    """This device's `StepCost` at this context: one target-only run (the anchor's call) and one run of the draft
    verifying every draft at forced acceptance, on warmed-up models."""
    target_only, forced = configs[TARGET_ONLY][0], configs[f"draft {draft_name}"][0]
    alone = summarize(target_only.run(context_embeds, new_tokens)[1])
    full = summarize(forced.run(context_embeds, new_tokens)[1][1:])  # the first step ingests the context
    verified = statistics.fmean(len(step.drafted) for step in forced.last_steps[2:])
    return StepCost.from_calls(drafting_ms=full["draft_ms"] + full["markov_ms"] + full["host_ms"],
                               anchor_ms=alone["target_ms"], verification_ms=full["target_ms"], drafts=round(verified))


class PrefillOnce:
    """A `LanguageModelSession` that prefills each context once: a later prefill of the same embeddings restores the
    state the first one left. The runs of a context repeat its prefill, which is no part of the per-step times."""

    def __init__(self, session):
        self.session, self._done = session, {}

    def prefill(self, inputs_embeds):
        key = (inputs_embeds.shape, hash(np.ascontiguousarray(inputs_embeds, np.float32).tobytes()))
        if key not in self._done:
            logits, hidden = self.session.prefill(inputs_embeds)
            self._done[key] = (logits, hidden, self.session.snapshot())
        logits, hidden, snapshot = self._done[key]
        self.session.restore(snapshot)
        return logits.copy(), hidden.copy()

    def __getattr__(self, name):
        return getattr(self.session, name)


def greedy_reference(language_model, embed, context_embeds: np.ndarray, length: int) -> tuple[list[int], np.ndarray]:
    """Target-only greedy tokens after the context, and each token's relative margin (`benchmarks.margins`)."""
    recorder = LogitRecorder(language_model)
    tokens, _, _ = StepCounters(SpeculativeDecoder(recorder, embed, stop_token_ids=())).run(context_embeds, length)
    return tokens, top_margins(np.stack(recorder.logits))[1]


def measure(language_models: dict, embed, drafts: dict, recorded: list[RecordedStep], *, contexts: list[int],
            thresholds: list[float], replay_draft: str, new_tokens: int, rounds: int, seed: int
            ) -> tuple[dict, dict]:
    """Interleaved runs of every configuration at every context and target precision (`language_models`:
    precision -> session): raw per-step counters and first differences per (context, precision, name), and the
    `StepCost` measured per (context, precision) before the runs (which the cost-aware replay uses)."""
    rng = np.random.default_rng(seed)
    vocab_size = embed.table.shape[0]
    setups, costs = {}, {}
    for context in contexts:
        context_embeds = embed(rng.integers(vocab_size, size=context))
        for precision, language_model in language_models.items():
            reference, margins = greedy_reference(language_model, embed, context_embeds, new_tokens + VERIFY_LENGTH)
            options = dict(vocab_size=vocab_size, replay_draft=replay_draft, recorded=recorded, thresholds=thresholds)
            configs = _decoders(language_model, embed, drafts, reference, **options)
            for counters, threshold, _ in configs.values():  # warm-up: every call length once, on a short context
                counters.run(context_embeds[:WARM_UP_CONTEXT], 2 * VERIFY_LENGTH, confidence_threshold=threshold)
            step_cost = measure_step_cost(configs, replay_draft, context_embeds, new_tokens)
            configs = _decoders(language_model, embed, drafts, reference, **options, step_cost=step_cost)
            setups[(context, precision)] = (context_embeds, reference, margins, configs)
            costs[(context, precision)] = step_cost
            print(f"  context {context}, target at {precision}: reference run and warm-ups done; step cost "
                  f"{step_cost.fixed_ms:.1f} ms + {step_cost.per_draft_ms:.2f} ms per draft verified", flush=True)
    raw = {}
    runs = [(context, precision, name) for (context, precision), setup in setups.items() for name in setup[3]]
    for round_index, (context, precision, name) in interleaved_rounds(runs, rounds):
        context_embeds, reference, margins, configs = setups[(context, precision)]
        counters, threshold, step_cost = configs[name]
        tokens, steps, seconds = counters.run(context_embeds, new_tokens, confidence_threshold=threshold,
                                              step_cost=step_cost)
        label = f"context {context}, {precision}, {name}, round {round_index}"
        check_invariant(tokens, reference, label=label, strict=precision == "f32")
        first = first_difference(tokens, reference[:len(tokens)])
        record = raw.setdefault((context, precision, name),
                                {"steps": [], "verified": [], "decode_s": [], "tokens": [], "differences": []})
        skip = 0 if name == TARGET_ONLY else 1  # the first speculative step ingests the context
        record["steps"] += steps[skip:]
        record["verified"] += [len(step.drafted) for step in counters.last_steps[1 + skip:]]
        record["decode_s"].append(seconds)
        record["tokens"].append(len(tokens))
        if first is not None:
            record["differences"].append({"round": round_index, "position": first,
                                          "reference_relative_margin": float(margins[first])})
        print(f"  round {round_index} context {context} {precision} {name}: {seconds:.2f} s", flush=True)
    return raw, costs


def report_rows(raw: dict, *, contexts: list[int], precisions: list[str]) -> list[dict]:
    """One row per (context, target precision, configuration): per-step times, speedups over target-only at the
    same precision (and at f32, when measured), and agreement with target-only decoding at the same precision."""
    rows = []
    for context in contexts:
        f32 = raw.get((context, "f32", TARGET_ONLY))
        f32_tokens_per_s = summarize(f32["steps"])["tokens_per_s"] if f32 else None
        for precision in precisions:
            baseline = summarize(raw[(context, precision, TARGET_ONLY)]["steps"])
            for (c, p, name), record in raw.items():
                if (c, p) != (context, precision):
                    continue
                summary = summarize(record["steps"])
                wall_ms = 1000 * statistics.fmean(step["wall"] for step in record["steps"])
                agreed = [next((d["position"] for d in record["differences"] if d["round"] == run), count)
                          for run, count in enumerate(record["tokens"])]
                rows.append({
                    "context": context, "precision": precision, "configuration": name,
                    "tokens_per_step": summary["tau"], "tokens_per_s": summary["tokens_per_s"],
                    "speedup": summary["tokens_per_s"] / baseline["tokens_per_s"],
                    "speedup_over_f32_target": summary["tokens_per_s"] / f32_tokens_per_s if f32_tokens_per_s else None,
                    "step_ms": wall_ms, "t_target_ms": summary["target_ms"], "t_draft_ms": summary["draft_ms"],
                    "t_markov_ms": summary["markov_ms"], "host_ms": summary["host_ms"],
                    "verified_per_step": statistics.fmean(record["verified"]) if record["verified"] else 0.0,
                    "agreement": sum(agreed) / sum(record["tokens"]), "differences": record["differences"],
                })
    return rows


def roofline_rows(rows: list[dict], *, weights: int, state_bytes, bandwidth: float) -> list[dict]:
    """One roofline line per target-only row: `state_bytes(context)` -> {part: bytes} (the session's
    `state_bytes`), `weights` bytes, `bandwidth` bytes/s; the target-only step (wall) is the measured decode."""
    return [{"precision": row["precision"]} | roofline_row(
                context=row["context"], per_token=bytes_per_token(weights=weights, state=state_bytes(row["context"])),
                bandwidth=bandwidth, decode_ms=row["step_ms"])
            for row in rows if row["configuration"] == TARGET_ONLY]


def print_tables(rows: list[dict], roofline: list[dict]) -> None:
    speed = [{"context": row["context"], "target": row["precision"], "configuration": row["configuration"],
              "tokens/step": f"{row['tokens_per_step']:.2f}", "drafts verified": f"{row['verified_per_step']:.1f}",
              "step (ms)": f"{row['step_ms']:.1f}", "target (ms)": f"{row['t_target_ms']:.1f}",
              "draft (ms)": f"{row['t_draft_ms']:.1f}", "Markov (ms)": f"{row['t_markov_ms']:.2f}",
              "host (ms)": f"{row['host_ms']:.1f}", "tok/s": f"{row['tokens_per_s']:.1f}",
              "speedup": f"{row['speedup']:.2f}x", "agreement": f"{row['agreement']:.1%}"} for row in rows]
    print("\n" + markdown_table(speed, right=set(speed[0]) - {"target", "configuration"}))
    for row in rows:
        for difference in row["differences"]:
            print(f"  context {row['context']}, {row['precision']}, {row['configuration']}, round "
                  f"{difference['round']}: first difference at token {difference['position']} (target-only margin "
                  f"there {difference['reference_relative_margin']:.3f} of the logits' spread)")
    bounds = [{"context": line["context"], "target": line["precision"],
               "weights (MB)": f"{line['weights_bytes'] / 1e6:.0f}",
               "K/V cache (MB)": f"{line['kv_cache_bytes'] / 1e6:.1f}",
               "linear states (MB)": f"{line['linear_state_bytes'] / 1e6:.1f}",
               "bandwidth (GB/s)": f"{line['bandwidth_gb_s']:.1f}", "bound (ms/token)": f"{line['bound_ms']:.1f}",
               "target only (ms/token)": f"{line['decode_ms']:.1f}", "over the bound": f"{line['over_bound']:.2f}x"}
              for line in roofline]
    print("\n" + markdown_table(bounds, right=set(bounds[0]) - {"target"}))


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser("benchmarks.cpu_speedup", __doc__)
    add_work_option(parser)
    add_contexts_option(parser)
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS),
                        help="the target's precisions (f32: tokens checked equal to target-only; default: the "
                             "device's own, agreement reported)")
    parser.add_argument("--input-scale", metavar="X", type=float_between(1.0, 1000.0), default=INPUT_SCALE,
                        help="sharpen_margins' input scale of the random target (its own cached IR per value)")
    parser.add_argument("--drafts", nargs="+", default=list(DRAFT_SETTINGS), choices=list(DRAFT_SETTINGS),
                        help="draft settings at forced acceptance (weight format x compile precision)")
    parser.add_argument("--thresholds", metavar="P", type=float_between(0.0, 1.0), nargs="+",
                        default=[0.0, 0.3, 0.5, 0.7, 0.9],
                        help="confidence thresholds of the replayed runs, 0 to 1 (0: all 15 drafts verified)")
    parser.add_argument("--replay-draft", default="int8", choices=list(DRAFT_SETTINGS),
                        help="the draft setting the replayed runs pay for")
    add_run_options(parser, new_tokens=128, rounds=2)
    add_json_option(parser, what="the settings, recorded steps and rows")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Builds or reuses the artefacts, records the tiny pair's steps, measures, prints the tables."""
    args = _parse_args(argv)
    recorded = record_tiny_pair_steps()
    print(f"recorded {len(recorded)} steps of the tiny pair: {statistics.fmean(s.accepted for s in recorded) + 1:.2f} "
          f"tokens per step", flush=True)
    target = prepare_target(args.work, "int8", input_scale=args.input_scale)
    embed = TableEmbeddings.of(target)
    max_length = max(args.contexts) + args.new_tokens + 4 * VERIFY_LENGTH
    language_models = {
        precision: PrefillOnce(LanguageModelSession(target, properties=compile_properties("CPU", precision=precision),
                                                    max_length=max_length))
        for precision in dict.fromkeys(args.precisions)}
    drafts, draft_precisions = {}, {}
    for name in dict.fromkeys([*args.drafts, args.replay_draft]):
        weight_format, precision = DRAFT_SETTINGS[name]
        drafts[name] = DSparkProposer.load(prepare_draft(args.work, weight_format), "CPU",
                                           properties=compile_properties("CPU", precision=precision), embed=embed)
        draft_precisions[name] = inference_precision(drafts[name].draft.compiled)
    print(f"draft settings (inference precision): {draft_precisions}; {args.new_tokens} tokens per run, "
          f"{args.rounds} rounds", flush=True)
    bandwidth_before = memory_bandwidth()
    raw, costs = measure(language_models, embed, drafts, recorded, contexts=args.contexts,
                         thresholds=args.thresholds, replay_draft=args.replay_draft, new_tokens=args.new_tokens,
                         rounds=args.rounds, seed=args.seed)
    bandwidth_after = memory_bandwidth()
    bandwidth = max(bandwidth_before["bandwidth"], bandwidth_after["bandwidth"])
    rows = report_rows(raw, contexts=args.contexts, precisions=list(language_models))
    roofline = roofline_rows(rows, weights=weight_bytes(target / LANGUAGE_MODEL_NAME),
                             state_bytes=next(iter(language_models.values())).state_bytes, bandwidth=bandwidth)
    print_tables(rows, roofline)
    step_costs = [{"context": context, "precision": precision} | asdict(cost)
                  for (context, precision), cost in costs.items()]
    for cost in step_costs:
        print(f"step cost at context {cost['context']}, target at {cost['precision']}: --step-cost "
              f"{cost['fixed_ms']:.0f} {cost['per_draft_ms']:.1f}")
    if args.json:
        settings = {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()}
        write_json(args.json, {"settings": settings, "draft_inference_precision": draft_precisions,
                               "bandwidth": {"before": bandwidth_before, "after": bandwidth_after},
                               "recorded_steps": [asdict(step) for step in recorded], "rows": rows,
                               "roofline": roofline, "step_costs": step_costs})


if __name__ == "__main__":
    main()
