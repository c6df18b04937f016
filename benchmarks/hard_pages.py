"""How a tiny pair reads the pages it is most easily wrong on: look-alike glyphs and rows of digits.

Reads the held-out pages of `utils.pages.hard_pages` through OpenVINO, as `python -m utils.ocr` reads them (Top-K
scorer, threshold 0.5), at the device's default precision and at f32:

- look-alike strings at every glyph size of the atlas: the accuracy of every look-alike class (0/O/o, 1/I/l/|,
  brackets, +/x, n/m, ...), the worst one, and the most frequent confusions;
- digit grids: CER, tokens per step, readings that reached the budget (no end of text) and that repeat or skip a row.

    python -m benchmarks.hard_pages [--pair DIR] [--per-size N] [--grids N] [--device CPU] [--json FILE]

Without `--pair` it reads the shipped pair (exported once into the models folder). Figures depend on the CPU's
kernels at bf16: name the CPU with them.
"""

from __future__ import annotations

from benchmarks.tiny_pair_options import add_pair_option
from utils.cli import add_json_option, command_parser, int_at_least, write_json
from utils.pages.hard_pages import DIGIT_GRID_PAGES, LOOK_ALIKE_PAGES_PER_SIZE

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("benchmarks.hard_pages", __doc__.split("\n\n", 1)[1])
    add_pair_option(parser)
    parser.add_argument("--per-size", metavar="N", type=int_at_least(1), default=LOOK_ALIKE_PAGES_PER_SIZE,
                        help="look-alike pages per glyph size")
    parser.add_argument("--grids", metavar="N", type=int_at_least(1), default=DIGIT_GRID_PAGES,
                        help="digit-grid pages")
    parser.add_argument("--device", metavar="DEVICE", default="CPU", help="the OpenVINO device")
    add_json_option(parser, what="the figures")
    args = parser.parse_args(argv)

    from utils.models import default_ir_pair, tiny_pair_ir
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline
    from utils.tiny.reading_report import hard_pages_summary, read_hard_pages

    target, draft = default_ir_pair() if args.pair is None else tiny_pair_ir(args.pair)
    source = args.pair or "the shipped pair"
    figures = {}
    for name, precision in (("default", "default"), ("f32", "f32")):
        pipeline = SpeculativeOcrPipeline(target, draft, device=args.device, precision=precision,
                                          draft_precision=precision)
        figures[name] = read_hard_pages(pipeline, per_size=args.per_size, grids=args.grids)
        print(f"{source} at {pipeline.inference_precision} ({args.device}):")
        print(hard_pages_summary(figures[name]))
    if args.json:
        write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
