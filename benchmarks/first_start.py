"""First start: the wall time of `python -m utils.ocr PAGE` on a fresh clone, reading the shipped IR, against the
same command exporting the tiny pair first, as every first start did before the IR shipped.

    python -m benchmarks.first_start [--rounds 3] [--json FILE]

Each command runs in a fresh interpreter with a new empty $DSPARK_OCR_MODELS (no export, no compiled model in
OpenVINO's cache: a fresh clone), on the first sample page at f32; "exporting first" sets DSPARK_OCR_FRESH_EXPORT,
which makes `utils.models.default_ir_pair` export the pair whatever the shipped IR. Both must print the same text (the
script stops otherwise). Figures are medians over --rounds, the commands' order turning round by round.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import add_rounds_option, interleaved_rounds
from utils.cli import add_json_option, command_parser, write_json
from utils.models import FRESH_EXPORT_VARIABLE, REPO_ROOT

COMMANDS = {"shipped IR": {}, "exporting first": {FRESH_EXPORT_VARIABLE: "1"}}


def first_read(page: Path, environ: dict[str, str]) -> tuple[float, str]:
    """(wall seconds, printed text) of `python -m utils.ocr PAGE --precision f32` with an empty models folder."""
    with tempfile.TemporaryDirectory() as models:
        start = time.perf_counter()
        completed = subprocess.run([sys.executable, "-m", "utils.ocr", str(page), "--precision", "f32"],
                                   cwd=REPO_ROOT, capture_output=True, text=True, check=True,
                                   env={key: value for key, value in os.environ.items() if key != FRESH_EXPORT_VARIABLE}
                                   | {"DSPARK_OCR_MODELS": models} | environ)
        return time.perf_counter() - start, completed.stdout


def main(argv: list[str] | None = None) -> int:
    from utils.pages.reading_pages import sample_pages

    parser = command_parser("benchmarks.first_start", __doc__.split("\n\n")[0])
    add_rounds_option(parser)
    add_json_option(parser, what="the medians")
    args = parser.parse_args(argv)
    seconds = {name: [] for name in COMMANDS}
    texts = set()
    with tempfile.TemporaryDirectory() as work:
        page = Path(work) / "page.png"
        sample_pages()[0].image.save(page)
        for _, name in interleaved_rounds(list(COMMANDS), args.rounds):
            wall, text = first_read(page, COMMANDS[name])
            seconds[name].append(wall)
            texts.add(text)
            print(f"{name}: {wall:.1f} s", flush=True)
    if len(texts) != 1:
        raise SystemExit("the shipped IR and a fresh export printed different texts")
    medians = {name: round(statistics.median(values), 1) for name, values in seconds.items()}
    print("median wall time of a first `python -m utils.ocr page.png`: "
          + ", ".join(f"{name} {value} s" for name, value in medians.items()))
    if args.json:
        write_json(args.json, {"seconds": medians, "rounds": args.rounds})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
