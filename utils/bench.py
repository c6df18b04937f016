"""Command line: the acceptance and throughput study: target-only vs speculative decoding over the sample pages.

    python -m utils.bench [--target DIR] [--draft DIR ...] [--pages N] [--num-assistant-tokens N ...]
                          [--dense] [--max-new-tokens N] [--repeats N] [--device DEVICE]
                          [--precision f32|default] [--draft-precision f32|default] [--confidence-threshold P]
                          [--json FILE]

Every configuration (target only; each draft x Markov computation x num_assistant_tokens) first reads one
page untimed (warm-up: the first inferences of a compiled model pay one-off costs), then every page,
`repeats` times. The configurations take turns page by page, so the machine's drift hits all of them alike;
each page's time is the median of its repeats, and speedups are ratios measured in the same run: decode
tokens/s of a configuration over that of the target alone, as in notebook 05. The printed table has the
shape of the seed PR's validation table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from utils.cli import add_json_option, command_parser, existing_dir, float_between, int_at_least, write_json
from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD
from utils.engine.device import PRECISIONS
from utils.evaluation.benchmark import configurations, markdown_report, run_benchmark

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = command_parser("utils.bench", __doc__.split("\n\n", 2)[2])
    parser.add_argument("--target", metavar="DIR", type=existing_dir,
                        help="target IR folder (default: the tiny pair, exported on first use)")
    parser.add_argument("--draft", metavar="DIR", type=existing_dir, nargs="+",
                        help="draft IR folders to compare (default: the tiny draft)")
    parser.add_argument("--pages", metavar="N", type=int_at_least(1), default=10, help="how many sample pages")
    parser.add_argument("--num-assistant-tokens", metavar="N", type=int_at_least(1), nargs="+",
                        help="values to sweep (default: the draft's block size)")
    parser.add_argument("--dense", action="store_true", help="also run the dense Markov walk")
    parser.add_argument("--max-new-tokens", metavar="N", type=int_at_least(1), default=128,
                        help="the most tokens to write per page")
    parser.add_argument("--device", metavar="DEVICE", help="CPU, GPU or AUTO (default: GPU when present)")
    parser.add_argument("--repeats", metavar="N", type=int_at_least(1), default=3,
                        help="timed runs of each page (the median counts)")
    parser.add_argument("--precision", choices=PRECISIONS, default="f32",
                        help="f32: exact, every output checked equal; default: the device's own (bf16/f16)")
    parser.add_argument("--draft-precision", choices=PRECISIONS, default="default",
                        help="the draft's (never changes the output): default: the device's own, faster; f32: "
                             "acceptance figures that are the same on every machine")
    parser.add_argument("--confidence-threshold", metavar="P", type=float_between(0.0, 1.0),
                        default=DEFAULT_CONFIDENCE_THRESHOLD,
                        help="verify only the drafts the confidence head trusts this much, 0 to 1 (0: all)")
    add_json_option(parser, what="the results")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    from utils.pages.reading_pages import sample_pages

    pages = sample_pages()
    if args.pages > len(pages):
        parser.error(f"argument --pages: {args.pages} is out of range: there are {len(pages)} sample pages")
    target, drafts = args.target, args.draft
    if target is None:
        from utils.models import default_ir_pair

        target, default_draft = default_ir_pair()
        drafts = drafts or [default_draft]
    try:
        configs = configurations([Path(d) for d in drafts or []],
                                 num_assistant_tokens=args.num_assistant_tokens or [None], dense=args.dense)
        results = run_benchmark(Path(target), configs, pages[:args.pages], max_new_tokens=args.max_new_tokens,
                                repeats=args.repeats, device=args.device, precision=args.precision,
                                draft_precision=args.draft_precision,
                                confidence_threshold=args.confidence_threshold)
    except (ValueError, FileNotFoundError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    if args.json:
        write_json(args.json, results)
    print(markdown_report(results))
    if results["output_mismatches"]:
        print(f"warning: outputs differ from target-only on {results['output_mismatches']} "
              f"(reduced precision flips near-ties: use --precision f32)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
