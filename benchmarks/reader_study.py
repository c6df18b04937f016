"""Can the tiny target learn to read on a CPU? The study behind that question, one command away.

    python -m benchmarks.reader_study [--out DIR] [--steps N] [--hidden-size N] [--partial-rotary-factor X]
                                      [--distill] [--pages N] [--json FILE]

Builds a tiny pair of the reading sizes (`READING_PAIR`) whose target is trained to read typewriter pages
(`python -m utils.tiny --read`), then prints the held-out character error rate overall and by page kind, the
learning curve and the training time. With `--distill` it also distils the draft on that target and reads
held-out generated pages through OpenVINO in every setting of `utils.tiny.reading_report` (the CLI's defaults,
f32 under each draft walk, target only). `--hidden-size` and `--partial-rotary-factor` change the reading sizes,
the levers `docs/tiny-pair.md` measured. Figures, not a test: training time is this machine's.
"""

from __future__ import annotations

import sys
from pathlib import Path

from utils.cli import add_json_option, command_parser, float_between, int_at_least, write_json
from utils.tiny import DistillConfig, ReaderConfig, TinyPairConfig, build_tiny_pair
from utils.tiny.config import READING_DISTILL, READING_PAIR

__all__ = ["run_reader_study", "main"]


def run_reader_study(out: Path | str, read: ReaderConfig, *, distill: DistillConfig | None = None,
                     acceptance_pages: int = 20, sizes: dict | None = None) -> dict:
    """Trains a reading tiny target (and its draft) into `out` and returns the study's figures.

    Args:
        out: the pair's folder (rebuilt).
        read: the reading training (`ReaderConfig`).
        distill: distil the draft on the reading target and measure speculative decoding; None skips both.
        acceptance_pages: held-out generated pages the OpenVINO measurement reads in each setting.
        sizes: `TinyPairConfig` options that replace those of `READING_PAIR` (for example {"hidden_size": 64}).

    Returns:
        {"reading": ReaderReport.as_dict(), "acceptance": `measure_reading`'s figures or None, "sizes_mb": ...}.
    """
    from utils.files import folder_size
    from utils.tiny.reader import reading_summary
    from utils.tiny.reading_report import measure_reading, reading_report_summary

    pair = build_tiny_pair(out, TinyPairConfig(**(READING_PAIR | (sizes or {}))), read=read, distill=distill,
                           overwrite=True)
    print(reading_summary(pair.reading))
    figures = {"reading": pair.reading.as_dict(), "acceptance": None,
               "sizes_mb": {part.name: round(folder_size(part) / 1e6, 2) for part in (pair.target, pair.draft)}}
    if distill is not None:
        figures["acceptance"] = measure_reading(pair.root, pages=acceptance_pages)
        print(reading_report_summary(figures["acceptance"]))
    return figures


def main(argv: list[str] | None = None) -> int:
    defaults = ReaderConfig()
    parser = command_parser("benchmarks.reader_study", __doc__)
    parser.add_argument("--out", metavar="DIR", type=Path, default=Path("models/reader-study"),
                        help="the pair's folder (rebuilt)")
    parser.add_argument("--steps", metavar="N", type=int_at_least(1), default=defaults.steps,
                        help="reading training steps")
    parser.add_argument("--refine-steps", metavar="N", type=int_at_least(0), default=0,
                        help="refining steps on look-alike glyphs and repeating rows after them (default 0: the "
                             "first phase alone, as the shipped pair)")
    parser.add_argument("--hidden-size", metavar="N", type=int_at_least(16),
                        help=f"the target's and draft's width (default: {TinyPairConfig(**READING_PAIR).hidden_size})")
    parser.add_argument("--partial-rotary-factor", metavar="X", type=float_between(0.0, 1.0),
                        help="the share of a head's dimensions that RoPE rotates "
                             f"(default: {READING_PAIR['partial_rotary_factor']})")
    parser.add_argument("--distill", action="store_true", help="distil the draft too and measure tokens per step")
    parser.add_argument("--pages", metavar="N", type=int_at_least(1), default=20,
                        help="held-out pages of the speculative measurement")
    add_json_option(parser, what="the figures")
    args = parser.parse_args(argv)
    distill = DistillConfig(**READING_DISTILL) if args.distill else None
    sizes = {name: getattr(args, name) for name in ("hidden_size", "partial_rotary_factor")
             if getattr(args, name) is not None}
    try:
        figures = run_reader_study(args.out, ReaderConfig(steps=args.steps, refine_steps=args.refine_steps),
                                   distill=distill, acceptance_pages=args.pages, sizes=sizes)
    except ValueError as error:
        parser.error(str(error))
    if args.json:
        write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
