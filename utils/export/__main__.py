"""Command line: `python -m utils.export draft --model SRC --out DIR [--weight-format fp32|fp16] [--overwrite]`.

Each subcommand registers itself with an `add_*_command(subparsers)` function that sets its handler, so more
subcommands (the target) sit next to `draft` without touching it. A handler returns the exit code: 0 on
success, 2 when the input is rejected (with a message naming what is wrong).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from utils.files import folder_size

__all__ = ["add_draft_command", "main"]


def _run_draft(args: argparse.Namespace) -> int:
    from utils.draft.config import DraftValidationError
    from utils.export.draft import export_draft

    if Path(args.out).exists() and not args.overwrite:
        print(f"error: {args.out} already exists; pass --overwrite to replace it", file=sys.stderr)
        return 2
    try:
        out = export_draft(args.model, args.out, weight_format=args.weight_format, overwrite=args.overwrite)
    except DraftValidationError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"draft exported ({args.weight_format}, {folder_size(out) / 1e6:.2f} MB): {out}")
    return 0


def add_draft_command(subparsers) -> None:
    """Registers `draft`: export a DSpark draft folder to OpenVINO IR."""
    from utils.export.draft import WEIGHT_FORMATS

    parser = subparsers.add_parser("draft", help="export a DSpark draft (pruned vocabulary) to OpenVINO IR",
                                   description="Validates the draft, then writes openvino_model.xml, "
                                               "openvino_markov_head_model.xml, config.json and "
                                               "local-to-target.json into DIR, atomically.")
    parser.add_argument("--model", required=True, help="the draft folder (config.json, model.safetensors, ...)")
    parser.add_argument("--out", required=True, help="the folder to create")
    parser.add_argument("--weight-format", choices=WEIGHT_FORMATS, default="fp32")
    parser.add_argument("--overwrite", action="store_true", help="replace DIR if it exists")
    parser.set_defaults(handler=_run_draft)


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and runs the chosen subcommand; returns its exit code."""
    parser = argparse.ArgumentParser(prog="python -m utils.export", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_draft_command(subparsers)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
