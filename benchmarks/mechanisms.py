"""What each DSpark mechanism changes on ordinary pages: the Markov walk, the Top-K scorer, the confidence head and
the pruned vocabulary, measured on one pair by one command (`utils.evaluation.mechanisms`).

Reads the held-out generated pages and the pages written by hand (`utils.pages.written_pages`) through OpenVINO,
once per way of drafting (Top-K scorer, dense walk, per-position argmax), at the command line's defaults (the
device's precision, confidence threshold 0.5) or the precision given, and prints each figure beside its goal:

- acceptance at the last block position over the first, with the per-position argmax (decays without the walk);
- tokens per step of each walk over the argmax (the walk pays);
- the share of draft positions where Top-64 and the dense walk choose differently, and the Markov head's time;
- the confidence head's AUC over the rejected drafts, beside the draft's own probability;
- the share of answer tokens outside the draft vocabulary, and where acceptance stopped at them.

    python -m benchmarks.mechanisms [--pair DIR] [--pages N] [--precision default|f32] [--device CPU] [--json FILE]

Without `--pair` it measures the shipped pair. Figures at the default precision depend on the CPU's kernels (bf16
where the CPU has it): name the CPU with them.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.tiny_pair_options import add_held_out_pages_option, add_pair_option
from utils.cli import add_json_option, command_parser, write_json
from utils.engine.device import PRECISIONS

__all__ = ["main"]


def _report(figures: dict) -> str:
    from utils.evaluation.mechanisms import goal_lines

    lines = [f"{figures['pages']} pages at {figures['precision'] or 'the device default'} (draft "
             f"{figures['draft_precision'] or 'the device default'}), confidence threshold "
             f"{figures['confidence_threshold']:g}:"]
    for name, reading in figures["readings"].items():
        first, last = reading["acceptance"]["first"], reading["acceptance"]["last"]
        lines.append(f"  {name}: {reading['tokens_per_step']:.2f} tokens per step; acceptance {first['rate']:.3f} "
                     f"at position {first['position']}, {last['rate']:.3f} at position {last['position']} "
                     f"({last['reached']} reached); Markov head {reading['markov_head_ms_per_block']:.2f} ms a block")
    walks, confidence, outside = figures["walks_differ"], figures["confidence"], figures["pruned_vocabulary"]
    lines += [f"  Top-K and dense walk choose alike at {walks['top_k_equals_dense']} of {walks['positions']} "
              f"draft positions; Top-K keeps the argmax at {walks['top_k_equals_argmax']}",
              f"  confidence head AUC {confidence['head_auc']}, the draft's own probability "
              f"{confidence['draft_probability_auc']}, over {confidence['rejected_drafts']} rejected of "
              f"{confidence['scored_drafts']} scored drafts",
              f"  {outside['outside']} of {outside['answer_tokens']} answer tokens outside the draft vocabulary; "
              f"{outside['stopped_acceptance']} ended an accepted prefix (at draft positions "
              f"{outside['stopped_at_position'] or 'none'})"]
    return "\n".join(lines + ["  " + line for line in goal_lines(figures["summary"])])


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("benchmarks.mechanisms", __doc__.split("\n\n", 1)[1])
    add_pair_option(parser)
    add_held_out_pages_option(parser)
    parser.add_argument("--precision", choices=PRECISIONS, default="default",
                        help="target and draft precision: default, the command line's; f32, alike on every CPU")
    parser.add_argument("--device", metavar="DEVICE", default="CPU", help="the OpenVINO device")
    add_json_option(parser, what="the figures")
    args = parser.parse_args(argv)

    from utils.checkpoint.draft import LOCAL_TO_TARGET
    from utils.evaluation.mechanisms import mechanism_figures
    from utils.models import default_ir_pair, tiny_pair_ir
    from utils.pages.reading_pages import reading_pages
    from utils.pages.written_pages import written_pages
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    target, draft = default_ir_pair() if args.pair is None else tiny_pair_ir(args.pair)
    pipeline = SpeculativeOcrPipeline(target, draft, device=args.device, precision=args.precision,
                                      draft_precision=args.precision)
    vocabulary = json.loads((Path(draft) / LOCAL_TO_TARGET).read_text())
    pages = reading_pages(args.pages, seed=0, split="held-out") + written_pages()
    figures = mechanism_figures(pipeline, pages, vocabulary)
    print(f"{args.pair or 'the shipped pair'} on {args.device}: {_report(figures)}")
    if args.json:
        write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
