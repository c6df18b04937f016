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
import statistics
from pathlib import Path

import numpy as np

from benchmarks.harness import (BLOCK_SIZE, TableEmbeddings, add_contexts_option, add_run_options, add_work_option,
                                interleaved_rounds, prepare_draft, prepare_target)
from benchmarks.real_size_model import VERIFY_LENGTH
from benchmarks.stand_ins import ForcedAcceptanceProposer, StepCounters, summarize, tau_schedule
from utils.cli import add_json_option, command_parser, float_between, write_json
from utils.contract import WEIGHT_FORMATS
from utils.engine.decoder import SpeculativeDecoder
from utils.engine.device import PRECISIONS
from utils.engine.draft import DSparkProposer
from utils.evaluation.compare import first_difference
from utils.notebook.display import markdown_table

__all__ = ["check_invariant", "measure", "main"]


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
    runs = [(context, name) for context, (_, _, runners) in setups.items() for name in runners]
    for round_index, (context, name) in interleaved_rounds(runs, rounds):
        context_embeds, reference, runners = setups[context]
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
    efficiency = [{"context": row["context"], "tau": f"{row['tau']:.2f}", "t1 (ms)": f"{row['t1_ms']:.1f}",
                   "t_verify (ms)": f"{row['t_verify_ms']:.1f}", "t_draft (ms)": f"{row['t_draft_ms']:.1f}",
                   "t_markov (ms)": f"{row['t_markov_ms']:.1f}", "host/step (ms)": f"{row['host_per_step_ms']:.1f}",
                   "target-only tok/s": f"{row['target_tokens_per_s']:.1f}",
                   "speculative tok/s": f"{row['spec_tokens_per_s']:.1f}", "speedup": f"{row['speedup']:.2f}x",
                   "physics bound": f"{row['physics_bound']:.2f}x", "efficiency": f"{row['efficiency']:.0%}"}
                  for row in rows]
    print("\n" + markdown_table(efficiency, right=set(efficiency[0])))
    host = [{"context": row["context"], "tau": f"{row['tau']:.2f}",
             "session host (verify+accept)": f"{row['session_host_ms']:.1f}",
             "draft host (draft+Markov)": f"{row['draft_host_ms']:.1f}",
             "target-only host/token": f"{row['target_host_per_token_ms']:.1f}",
             "first spec step (ms)": f"{row['first_step_ms']:.0f}",
             "speedup incl. first step": f"{row['speedup_with_first_step']:.2f}x",
             "invariant": "held" if row["invariant_held"] else "BROKEN"} for row in rows]
    print("\n" + markdown_table(host, right=set(host[0]) - {"invariant"}))


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser("benchmarks.engine_efficiency", __doc__)
    add_work_option(parser)
    parser.add_argument("--weight-format", default="int8", choices=WEIGHT_FORMATS, help="target weights")
    parser.add_argument("--draft-weight-format", default="fp32", choices=WEIGHT_FORMATS, help="draft weights")
    parser.add_argument("--precision", default="f32", choices=PRECISIONS,
                        help="f32: f32 hint and no dynamic activation quantization (exact: the invariant is "
                             "asserted); default: the CPU's defaults (bf16 here; mismatches are reported, not fatal, "
                             "and the forced acceptance collapses after the first one, so tau falls towards 1)")
    add_contexts_option(parser)
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
    embed = TableEmbeddings.of(target_folder)
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
