"""The draft's step cost against the context it has cached: does a step at 3k cost more than a step at 1k?

A draft step is one backbone call (a block of B positions over the cached context plus the new context) and
one Markov head walk. Its cost should barely depend on the context: the context enters only through the block's
attention. For each context C and precision, the script caches C random context positions in one call, then
times `--steps` steady steps, each adding `--new-context` positions (the tokens a step emits) and cropped back
to C afterwards, as a rollback would, so every timed step sees the same context. Host time (the cache's append)
is reported apart from the two inferences.

The draft is the random real-size DSpark draft of `benchmarks.harness` (`--draft-format`, built in
--work on first use), or any exported draft folder (`--draft DIR`). Contexts and precisions take turns round by
round, so drift of the shared CPU hits them alike.

    python -m benchmarks.draft_step [--contexts 1024 3072] [--precisions f32 default] [--draft-format int4]

Only `utils.engine` is used to run the draft, so `PYTHONPATH=<older checkout> python benchmarks/draft_step.py
--draft DIR` times a draft exported by older code with that code's runtime: the before of a before/after.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import (add_contexts_option, add_rounds_option, add_work_option, interleaved_rounds,
                                prepare_draft)
from utils.cli import command_parser, int_at_least
from utils.contract import INPUTS_EMBEDS, WEIGHT_FORMATS
from utils.engine.device import PRECISIONS, compile_properties, inference_precision
from utils.engine.draft import DraftModel, MarkovHead
from utils.notebook.display import markdown_table


def _draft_folder(args) -> Path:
    if args.draft is not None:
        return args.draft
    return prepare_draft(args.work, args.draft_format)


def _step(draft: DraftModel, head: MarkovHead, block: np.ndarray, new_context: np.ndarray) -> dict:
    """One timed draft step at the current context; returns milliseconds per part."""
    backbone_before, head_before = draft.clock.seconds, head.clock.seconds
    start = time.perf_counter()
    logits, hidden = draft.forward_block(block, new_context)
    head.walk(logits, hidden, anchor=1, num_tokens=len(logits))
    wall = time.perf_counter() - start
    backbone, walk = draft.clock.seconds - backbone_before, head.clock.seconds - head_before
    return {"step": 1e3 * wall, "backbone": 1e3 * backbone, "markov": 1e3 * walk,
            "host": 1e3 * (wall - backbone - walk)}


def measure(folder: Path, *, contexts: list[int], precisions: list[str], steps: int, rounds: int,
            new_context: int, device: str = "CPU") -> dict:
    """{(precision, context): {part: median ms}} over `rounds` x `steps` steady steps."""
    rng = np.random.default_rng(0)
    parts = {}
    for precision in precisions:
        properties = compile_properties(device, precision=precision)
        draft, head = DraftModel(folder, device, properties=properties), MarkovHead(folder, device,
                                                                                   properties=properties)
        parts[precision] = (draft, head, inference_precision(draft.compiled))
    draft = parts[precisions[0]][0]
    hidden_size = draft.compiled.input(INPUTS_EMBEDS).get_partial_shape()[2].get_length()
    width = len(draft.info.target_layer_ids) * hidden_size
    block = rng.standard_normal((1, draft.info.block_size, hidden_size), np.float32)
    samples = {(precision, context): [] for precision in precisions for context in contexts}
    for _, (precision, context) in interleaved_rounds(list(samples), rounds):
        draft, head, _ = parts[precision]
        draft.crop(0)
        draft.forward_block(block, rng.standard_normal((1, context, width), np.float32))
        draft.crop(context)
        for _ in range(steps):
            samples[precision, context].append(
                _step(draft, head, block, rng.standard_normal((1, new_context, width), np.float32)))
            draft.crop(context)
    medians = {key: {part: statistics.median(sample[part] for sample in values) for part in values[0]}
               for key, values in samples.items()}
    return medians | {"ran_at": {precision: parts[precision][2] for precision in precisions}}


def main(argv: list[str] | None = None) -> None:
    parser = command_parser("benchmarks.draft_step", __doc__.split("\n\n", 1)[1])
    parser.add_argument("--draft", metavar="DIR", type=Path, help="an exported draft folder (default: the random "
                                                                  "real-size draft, built in --work)")
    parser.add_argument("--draft-format", default="int4", choices=WEIGHT_FORMATS,
                        help="weights of the random real-size draft")
    add_work_option(parser)
    add_contexts_option(parser)
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument("--steps", metavar="N", type=int_at_least(1), default=10, help="timed steps per round")
    add_rounds_option(parser)
    parser.add_argument("--new-context", metavar="N", type=int_at_least(0), default=6,
                        help="context positions each step adds (the tokens a step emits)")
    args = parser.parse_args(argv)
    folder = _draft_folder(args)
    results = measure(folder, contexts=args.contexts, precisions=args.precisions, steps=args.steps,
                      rounds=args.rounds, new_context=args.new_context)
    ran_at = results.pop("ran_at")
    print(f"draft {folder}: median ms per step ({args.rounds} rounds x {args.steps} steps, "
          f"{args.new_context} new context positions per step)")
    table = []
    for precision in args.precisions:
        first = results[precision, args.contexts[0]]["step"]
        for context in args.contexts:
            row = results[precision, context]
            table.append({"precision (ran at)": f"{precision} ({ran_at[precision]})", "context": context,
                          "step": f"{row['step']:.1f}", "backbone": f"{row['backbone']:.1f}",
                          "Markov head": f"{row['markov']:.1f}", "host": f"{row['host']:.1f}",
                          "step / step at the first context": f"{row['step'] / first:.2f}x"})
    print(markdown_table(table, right=set(table[0]) - {"precision (ran at)"}))


if __name__ == "__main__":
    sys.exit(main())
