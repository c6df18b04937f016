"""Engine efficiency of speculative decoding at real size: measured speedup over the physics bound, in one run.

The physics bound of a speculative step is what the inferences alone allow: tau tokens per step cost
t_verify + t_draft + t_markov instead of tau decode steps of t1 each, so speedup <= tau x t1 / (t_verify +
t_draft + t_markov). Engine efficiency = measured speedup / that bound: what the loop, the
session's state handling and the host work keep of it. To separate the engine from the draft's quality,
acceptance is forced:

- target: the random real-size Qwen3.5 text model (`benchmarks.real_size_model`), exported with
  `export_language_model` (int8 weights by default, verify length 16, hidden layers [3, 7, 11, 15, 19]);
- draft: a random DSpark draft of the real draft's size (296.8M parameters, block 15, Markov rank 256),
  written in the published layout and exported with `export_draft`, so the draft and Markov head IRs cost
  what the real ones do;
- a reference target-only run records the target's greedy continuation of a random context of C tokens;
  the stand-in proposer runs the draft and Markov head IRs every step (their random tokens are discarded)
  and proposes the known continuation for the first `a` positions, then a wrong token, with `a` scheduled
  so that tokens per step tau = a + 1 averages the requested value.

Both modes run through the decoding engine the OCR pipeline uses (`utils.engine.decoder.SpeculativeDecoder`),
text only: the prompt is the random context's embeddings, taken from a numpy copy of the target's embedding
table. Per-step counters are read in the decoder's `on_step` callback. Configurations are interleaved,
rounds rotate their order, so drift in the shared CPU hits all of them alike. Per-step times are means over
the steady steps: the first speculative step is left out (the draft ingests the C context positions there;
reported apart as "first step"). Every run's
tokens must equal the target-only greedy tokens; with `--precision f32` (f32 hint, and the CPU plugin's dynamic
activation quantization off, which otherwise makes the 1-token and 16-token IRs disagree) a mismatch stops
the script.

    python -m benchmarks.engine_efficiency [--contexts 1024 3072] [--taus 2 4 5.47 8 16] [--json FILE]

Artefacts are cached in --work (3.3 GB target: three int8 IRs and the embedding table; 1.2 GB draft
checkpoint; 1.2 GB draft IR); the first run builds them (7 min on the shared 2-core machine). Peak memory:
~11 GB (export, and measuring with the three compiled target IRs and the draft IRs).
"""

from __future__ import annotations

import argparse
import gc
import math
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.real_size_model import (EMBEDDINGS_FILE, VERIFY_LENGTH, export_random_text_model,
                                        real_size_draft_config, real_size_text_config, write_random_draft)
from utils.cli import add_json_option, command_parser, float_between, int_at_least, write_json
from utils.contract import WEIGHT_FORMATS, LanguageModelConfig
from utils.engine.decoder import SpeculativeDecoder
from utils.engine.draft import DSparkProposer
from utils.engine.proposal import Proposal
from utils.engine.step_cost import StepCost
from utils.engine.timing import Clock, StageTimer
from utils.evaluation.compare import first_difference

__all__ = ["add_run_options", "TableEmbeddings", "tau_schedule", "ForcedAcceptanceProposer", "StepCounters", "in_round_order",
           "check_invariant", "summarize", "main"]

BLOCK_SIZE = VERIFY_LENGTH - 1
PREFILL_CHUNK = 128
COUNTERS = ("wall", "target", "session", "draft", "markov", "draft_stage", "markov_stage")


def _exported_as_now(folder: Path) -> bool:
    """Whether `folder` holds a language model of this exporter's layout and of the benchmark's call lengths."""
    try:
        config = LanguageModelConfig.read(folder)
    except ValueError:  # an older exporter's layout
        return False
    return (config.prefill_chunk, config.verify_length) == (PREFILL_CHUNK, VERIFY_LENGTH)


def prepare_target(work: Path, weight_format: str, *, input_scale: float | None = None) -> Path:
    """The exported random target (and its embedding table as .npy) in `work`, built on first use.

    With `input_scale`, the target has trained-like margins (`benchmarks.real_size_model.sharpen_margins`) and a
    folder of its own.
    """
    from utils.files import atomic_directory

    folder = work / (f"target-{weight_format}" if input_scale is None else f"target-{weight_format}-x{input_scale:g}")
    if folder.is_dir() and _exported_as_now(folder):
        return folder
    if folder.is_dir():  # exported by an older exporter or with other lengths: export again
        shutil.rmtree(folder)
    with atomic_directory(folder) as staging:
        export_random_text_model(staging, weight_format=weight_format, prefill_chunk=PREFILL_CHUNK,
                                 input_scale=input_scale)
    return folder


def prepare_draft(work: Path, weight_format: str) -> Path:
    """The exported random real-size draft in `work`, built (checkpoint, then IR) on first use."""
    from utils.export.draft import export_draft
    from utils.files import atomic_directory
    from utils.models import current_draft_export

    source, folder = work / "draft-checkpoint", work / f"draft-{weight_format}"
    if not source.is_dir():
        text_config = real_size_text_config()
        config = real_size_draft_config(text_config, block_size=BLOCK_SIZE,
                                        mask_token_id=text_config.vocab_size - 1)
        with atomic_directory(source) as staging:
            parameters = write_random_draft(staging, config)
        print(f"random DSpark draft: {parameters / 1e6:.1f}M parameters", flush=True)
    if not current_draft_export(folder):  # absent, or exported by older code
        start = time.perf_counter()
        export_draft(source, folder, weight_format=weight_format, overwrite=True)
        print(f"  draft exported ({weight_format}) in {time.perf_counter() - start:.0f} s", flush=True)
        gc.collect()
    return folder


class TableEmbeddings:
    """Rows of the target's embedding table, held in numpy: stands in for the text-embedding IR."""

    def __init__(self, table: np.ndarray):
        self.table = table
        self.clock = Clock()

    def __call__(self, input_ids: np.ndarray) -> np.ndarray:
        """[batch, S] int -> [batch, S, H] float32."""
        with self.clock.measure():
            return self.table[np.asarray(input_ids)]


def accepted_drafts(tau: float, step: int) -> int:
    """Drafts to accept at step `step` (0-based) so that the running mean of accepted + 1 tracks `tau`."""
    per_step = tau - 1.0
    return math.floor((step + 1) * per_step + 1e-9) - math.floor(step * per_step + 1e-9)


def tau_schedule(tau: float) -> Callable[[int], tuple[int, tuple[float, ...] | None]]:
    """step -> (drafts to accept, no confidences of its own): `tau` tokens per step on average."""
    if not 1.0 <= tau <= VERIFY_LENGTH:
        raise ValueError(f"tau={tau} must be in [1, {VERIFY_LENGTH}] (tokens per step of a block of "
                         f"{BLOCK_SIZE} drafts)")
    return lambda step: (accepted_drafts(tau, step), None)


class ForcedAcceptanceProposer:
    """A stand-in draft with forced acceptance: pays for the real draft and Markov head IRs, proposes known tokens.

    Each step runs the wrapped `DSparkProposer` (so the draft's context cache grows as in real use), then
    discards its tokens: the first `accepted` proposals of the schedule's step are the target's known greedy
    continuation, the next one is wrong on purpose, the rest are the draft's own (random) tokens. The
    confidences are the schedule's, when it has them (a replay of recorded runs), else the draft's. It finds
    its place in the continuation from the contexts it receives (`utils.engine.proposal`). Without a draft
    (`draft=None`) nothing is paid for and every proposal after the wrong one is wrong too.
    """

    def __init__(self, draft: DSparkProposer | None, continuation: list[int], *,
                 schedule: Callable[[int], tuple[int, tuple[float, ...] | None]], vocab_size: int):
        self.draft, self.continuation, self.schedule, self.vocab_size = draft, continuation, schedule, vocab_size
        self.clocks = draft.clocks if draft else ()
        self.reset()

    def reset(self) -> None:
        if self.draft:
            self.draft.reset()
        self._step, self._generated = 0, None

    def propose(self, anchor, context, *, num_tokens, timer) -> Proposal:
        walked = self.draft.propose(anchor, context, num_tokens=num_tokens, timer=timer) if self.draft else None
        self._generated = 1 if self._generated is None else self._generated + len(context)
        accepted, confidences = self.schedule(self._step)
        accepted = min(accepted, num_tokens)
        self._step += 1
        start = self._generated
        drafts = list(self.continuation[start:start + accepted])
        if accepted < num_tokens:
            wrong = (self.continuation[start + accepted] + 1) % self.vocab_size
            drafts.append(wrong)
            drafts += walked.target_ids[accepted + 1:num_tokens] if walked else [wrong] * (num_tokens - len(drafts))
        if confidences is not None:
            confidences = (tuple(confidences) + (0.0,) * num_tokens)[:num_tokens]
        return Proposal(tuple(drafts), walked.confidences if confidences is None and walked else confidences)


class StepCounters:
    """Runs a decoder and records, after every step, the wall clock and the clocks of each part.

    The decoder's `on_step` callback reads them; the difference between two consecutive readings is one
    step's cost (`COUNTERS`).
    """

    def __init__(self, decoder: SpeculativeDecoder):
        self.decoder = decoder
        self.last_steps = []  # the StepRecords of the last run, the prefill step first

    def _reading(self, timer: StageTimer) -> dict:
        language_model = self.decoder.language_model
        clocks = self.decoder.proposer.clocks if self.decoder.proposer else ()
        draft, markov = (clock.seconds for clock in clocks) if clocks else (0, 0)  # a stand-in runs no IR
        stages = timer.seconds
        return {"wall": time.perf_counter(), "target": language_model.clock.seconds,
                "session": language_model.host_seconds, "draft": draft, "markov": markov,
                "draft_stage": stages["draft"], "markov_stage": stages["markov_head"]}

    def run(self, context_embeds: np.ndarray, max_new_tokens: int, *, confidence_threshold: float = 0.0,
            step_cost: StepCost | None = None) -> tuple[list[int], list[dict], float]:
        """(tokens, per-step counters after the first token, decode seconds) of one generation after the context."""
        timer, readings, emitted = StageTimer(), [], []

        def record(step, tokens):
            readings.append(self._reading(timer))
            emitted.append(len(step.emitted))

        decoded = self.decoder.generate(context_embeds, max_new_tokens=max_new_tokens, timer=timer, on_step=record,
                                        confidence_threshold=confidence_threshold, step_cost=step_cost)
        self.last_steps = decoded.metrics.steps
        steps = [{key: after[key] - before[key] for key in COUNTERS} | {"emitted": count}
                 for before, after, count in zip(readings, readings[1:], emitted[1:])]
        return decoded.tokens, steps, decoded.metrics.decode_seconds


def _mean_ms(steps: list[dict], key) -> float:
    return 1000 * statistics.fmean(key(step) if callable(key) else step[key] for step in steps)


def _infer(step: dict) -> float:
    return step["target"] + step["draft"] + step["markov"]


def summarize(steps: list[dict]) -> dict:
    """Mean per-step times (ms), tokens per step and tokens/s of pooled steady steps.

    Means, not medians: with them, speedup / bound is exactly (inference share of the speculative wall time) /
    (inference share of the target-only wall time), so a slowdown of the shared CPU that hits host and
    inference alike cancels out of the efficiency even when it hits the configurations unequally.
    """
    tokens, wall = sum(step["emitted"] for step in steps), sum(step["wall"] for step in steps)
    return {
        "steps": len(steps), "tau": tokens / len(steps), "tokens_per_s": tokens / wall,
        "target_ms": _mean_ms(steps, "target"), "draft_ms": _mean_ms(steps, "draft"),
        "markov_ms": _mean_ms(steps, "markov"),
        "host_ms": _mean_ms(steps, lambda step: step["wall"] - _infer(step)),
        "session_host_ms": _mean_ms(steps, "session"),
        "draft_host_ms": _mean_ms(steps, lambda step: step["draft_stage"] + step["markov_stage"]
                                  - step["draft"] - step["markov"]),
    }


def in_round_order(names: list, round_index: int) -> list:
    """The configurations in the order of round `round_index`: each round starts one later, so the shared CPU's
    drift hits all of them alike."""
    shift = round_index % len(names)
    return names[shift:] + names[:shift]


def check_invariant(tokens: list[int], reference: list[int], *, label: str, strict: bool) -> bool:
    """True when the run reproduced the target-only greedy tokens; raises instead when `strict`."""
    first = first_difference(tokens, reference[:len(tokens)])
    if first is None:
        return True
    message = f"{label}: token {first} is {tokens[first]}, target-only greedy decoding gave {reference[first]}"
    if strict:
        raise RuntimeError(f"invariant broken: {message}")
    print(f"  warning: {message} (reduced precision: a block and single tokens round differently)", flush=True)
    return False


def measure(language_model, embed: TableEmbeddings, draft: DSparkProposer, *, contexts: list[int], taus: list[float],
            new_tokens: int, rounds: int, strict: bool, seed: int) -> dict:
    """Interleaved runs of target-only and forced-acceptance speculative decoding; raw steps per configuration."""
    rng = np.random.default_rng(seed)
    vocab_size = embed.table.shape[0]
    no_stop = ()  # a random model has no meaningful EOS: always run to the token budget
    target_only = StepCounters(SpeculativeDecoder(language_model, embed, stop_token_ids=no_stop))
    setups = {}
    for context in contexts:
        context_embeds = embed(rng.integers(vocab_size, size=context))
        reference, _, _ = target_only.run(context_embeds, new_tokens + VERIFY_LENGTH)  # also the warm-up
        runners = {"target": target_only} | {
            tau: StepCounters(SpeculativeDecoder(
                language_model, embed, stop_token_ids=no_stop, block_size=BLOCK_SIZE,
                proposer=ForcedAcceptanceProposer(draft, reference, schedule=tau_schedule(tau), vocab_size=vocab_size)))
            for tau in taus}
        setups[context] = (context_embeds, reference, runners)
    raw = {(context, name): {"steps": [], "first_step_ms": [], "decode_s": [], "matches": []}
           for context in contexts for name in ["target", *taus]}
    for round_index in range(rounds):
        for context, (context_embeds, reference, runners) in setups.items():
            for name in in_round_order(list(runners), round_index):
                tokens, steps, decode_seconds = runners[name].run(context_embeds, new_tokens)
                record = raw[(context, name)]
                record["matches"].append(check_invariant(tokens, reference, strict=strict,
                                                          label=f"context {context}, {name}, round {round_index}"))
                first = 0 if name == "target" else 1
                record["first_step_ms"].append(1000 * steps[0]["wall"])
                record["steps"] += steps[first:]
                record["decode_s"].append(decode_seconds)
                print(f"  round {round_index} context {context} {name}: {len(tokens)} tokens in "
                      f"{decode_seconds:.2f} s", flush=True)
    return raw


def report_rows(raw: dict, *, contexts: list[int], taus: list[float], new_tokens: int) -> list[dict]:
    """One row per (context, tau): the table's numbers."""
    rows = []
    for context in contexts:
        target = summarize(raw[(context, "target")]["steps"])
        target_e2e = sum(raw[(context, "target")]["decode_s"])
        for tau in taus:
            record = raw[(context, tau)]
            spec = summarize(record["steps"])
            bound = spec["tau"] * target["target_ms"] / (spec["target_ms"] + spec["draft_ms"] + spec["markov_ms"])
            speedup = spec["tokens_per_s"] / target["tokens_per_s"]
            rows.append({
                "context": context, "tau_requested": tau, "tau": spec["tau"], "t1_ms": target["target_ms"],
                "t_verify_ms": spec["target_ms"], "t_draft_ms": spec["draft_ms"], "t_markov_ms": spec["markov_ms"],
                "host_per_step_ms": spec["host_ms"], "session_host_ms": spec["session_host_ms"],
                "draft_host_ms": spec["draft_host_ms"], "target_host_per_token_ms": target["host_ms"],
                "target_tokens_per_s": target["tokens_per_s"], "spec_tokens_per_s": spec["tokens_per_s"],
                "speedup": speedup, "physics_bound": bound, "efficiency": speedup / bound,
                "speedup_with_first_step": target_e2e / sum(record["decode_s"]),
                "first_step_ms": statistics.median(record["first_step_ms"]),
                "invariant_held": all(record["matches"]), "new_tokens": new_tokens, "steady_steps": spec["steps"],
            })
    return rows


def print_tables(rows: list[dict]) -> None:
    """The markdown tables: efficiency, then where the host time of a speculative step goes."""
    print("\n| context | tau | t1 (ms) | t_verify (ms) | t_draft (ms) | t_markov (ms) | host/step (ms) "
          "| target-only tok/s | speculative tok/s | speedup | physics bound | efficiency |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['context']} | {row['tau']:.2f} | {row['t1_ms']:.1f} | {row['t_verify_ms']:.1f} "
              f"| {row['t_draft_ms']:.1f} | {row['t_markov_ms']:.1f} | {row['host_per_step_ms']:.1f} "
              f"| {row['target_tokens_per_s']:.1f} | {row['spec_tokens_per_s']:.1f} | {row['speedup']:.2f}x "
              f"| {row['physics_bound']:.2f}x | {row['efficiency']:.0%} |")
    print("\n| context | tau | session host (verify+accept) | draft host (draft+Markov) | target-only host/token "
          "| first spec step (ms) | speedup incl. first step | invariant |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        print(f"| {row['context']} | {row['tau']:.2f} | {row['session_host_ms']:.1f} | {row['draft_host_ms']:.1f} "
              f"| {row['target_host_per_token_ms']:.1f} | {row['first_step_ms']:.0f} "
              f"| {row['speedup_with_first_step']:.2f}x | {'held' if row['invariant_held'] else 'BROKEN'} |")


def add_run_options(parser: argparse.ArgumentParser, *, new_tokens: int, rounds: int) -> None:
    """--new-tokens, --rounds and --seed: how long each run is, how often it repeats, which random contexts."""
    parser.add_argument("--new-tokens", metavar="N", type=int_at_least(1), default=new_tokens,
                        help="tokens generated per run")
    parser.add_argument("--rounds", metavar="N", type=int_at_least(1), default=rounds,
                        help="interleaved repetitions of every configuration")
    parser.add_argument("--seed", metavar="N", type=int_at_least(0), default=0, help="seed of the random contexts")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser("benchmarks.engine_efficiency", __doc__)
    parser.add_argument("--work", metavar="DIR", type=Path, default=Path("/tmp/dspark-engine-bench"),
                        help="cache folder for the random models and their IRs")
    parser.add_argument("--weight-format", default="int8", choices=WEIGHT_FORMATS, help="target weights")
    parser.add_argument("--draft-weight-format", default="fp32", choices=WEIGHT_FORMATS, help="draft weights")
    parser.add_argument("--precision", default="f32", choices=["f32", "default"],
                        help="f32: f32 hint and no dynamic activation quantization (exact: the invariant is "
                             "asserted); default: the CPU's defaults (bf16 here; mismatches are reported, not fatal, "
                             "and the forced acceptance collapses after the first one, so tau falls towards 1)")
    parser.add_argument("--contexts", metavar="N", type=int_at_least(1), nargs="+", default=[1024, 3072],
                        help="context tokens C")
    parser.add_argument("--taus", metavar="X", type=float_between(1.0, VERIFY_LENGTH), nargs="+",
                        default=[2.0, 4.0, 5.47, 8.0, 16.0],
                        help=f"forced tokens per step, 1 to {VERIFY_LENGTH} (upstream's real pair: 5.47)")
    add_run_options(parser, new_tokens=192, rounds=3)
    add_json_option(parser, what="the settings, rows and steps")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Builds or reuses the artefacts, measures, prints the tables (and writes JSON with --json)."""
    args = _parse_args(argv)

    from utils.engine.device import compile_properties
    from utils.engine.language_model import LanguageModelSession

    target_folder = prepare_target(args.work, args.weight_format)
    draft_folder = prepare_draft(args.work, args.draft_weight_format)
    properties = compile_properties("CPU", precision=args.precision)
    embed = TableEmbeddings(np.load(target_folder / EMBEDDINGS_FILE, mmap_mode="r"))  # rows read on use
    language_model = LanguageModelSession(target_folder, properties=properties,
                                          max_length=max(args.contexts) + args.new_tokens + 2 * VERIFY_LENGTH)
    draft = DSparkProposer.load(draft_folder, "CPU", properties=properties, embed=embed)
    print(f"measuring: precision {args.precision}, target {args.weight_format}, draft {args.draft_weight_format}, "
          f"{args.new_tokens} tokens per run, {args.rounds} rounds", flush=True)
    raw = measure(language_model, embed, draft, contexts=args.contexts, taus=args.taus, new_tokens=args.new_tokens,
                  rounds=args.rounds, strict=args.precision == "f32", seed=args.seed)
    rows = report_rows(raw, contexts=args.contexts, taus=args.taus, new_tokens=args.new_tokens)
    print_tables(rows)
    if args.json:
        settings = {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()}
        steps = {f"{context}/{name}": record["steps"] for (context, name), record in raw.items()}
        write_json(args.json, {"settings": settings, "rows": rows, "steps": steps})


if __name__ == "__main__":
    main()
