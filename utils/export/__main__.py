"""Command line: export the target or the draft to OpenVINO IR.

    python -m utils.export target --model SRC --out DIR [--draft DRAFT] [--weight-format fp32|fp16|int8|int4]
                                  [--downsample-mode 4x|16x] [--max-slice-nums N] ...
    python -m utils.export draft --model SRC --out DIR [--weight-format fp32|fp16|int8|int4] [--drafts-per-step N]
                                 [--overwrite]

int8/int4 are NNCF weight compression (`utils.export.compression`): INT4 keeps the lm_head INT8.

A draft's drafts per step are read from the fields of its config.json that state them, in the order
`utils.checkpoint.config` documents with its sources; where the file leaves a choice, one line says which reading
was taken and why, and `--drafts-per-step N` decides instead. Every such note is one line on stderr.

`--downsample-mode` and `--max-slice-nums` size a page's image tokens; by default the checkpoint's own, except for
openbmb/MiniCPM-OCR-1.0, which is exported with its model card's serving recipe (4x, 9 slices), said when it
overrides the files (`utils.export.processor_settings`). The choice is recorded in the exported folder.

`--backend optimum` runs `optimum-cli export openvino` instead, when the installed optimum-intel can export
the model (a capability probe decides; otherwise the command says why and exits 2).

Each subcommand registers itself with an `add_*_command(subparsers)` function that sets its handler, so more
subcommands (the target) sit next to `draft` without touching it. A handler returns the exit code: 0 on
success, 2 when the input is rejected (with a message naming what is wrong).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from utils.cli import command_parser, existing_dir, int_at_least
from utils.contract import DEFAULT_PREFILL_CHUNK, DRAFT_MODEL, MARKOV_HEAD_MODEL, WEIGHT_FORMATS
from utils.contract.processor import DOWNSAMPLE_MODES
from utils.files import folder_size

__all__ = ["add_draft_command", "add_target_command", "main"]

PROG = "python -m utils.export"


def _run(args: argparse.Namespace, export) -> int:
    """Runs `export()` with the shared checks and messages; returns the exit code."""
    if Path(args.out).exists() and not args.overwrite:
        print(f"{PROG}: error: {args.out} already exists; pass --overwrite to replace it", file=sys.stderr)
        return 2
    with warnings.catch_warnings(record=True) as notes:
        warnings.simplefilter("always", UserWarning)
        try:
            if args.backend == "optimum":
                from utils.export.upstream import run_optimum_export

                out = run_optimum_export(args.command, args.model, args.out, weight_format=args.weight_format)
            else:
                out = export()
        except (ValueError, FileNotFoundError) as error:  # DraftValidationError is a ValueError
            error_line = f"{PROG}: error: {error}"
        else:
            error_line = None
    for note in dict.fromkeys(str(note.message) for note in notes if issubclass(note.category, UserWarning)):
        print(f"{PROG}: note: {note}", file=sys.stderr)
    if error_line:
        print(error_line, file=sys.stderr)
        return 2
    print(f"{args.command} exported ({args.weight_format}, {folder_size(out) / 1e6:.2f} MB): {out}")
    return 0


def _run_draft(args: argparse.Namespace) -> int:
    from utils.export.draft import export_draft

    return _run(args, lambda: export_draft(args.model, args.out, weight_format=args.weight_format,
                                           overwrite=args.overwrite, drafts_per_step=args.drafts_per_step))


def _run_target(args: argparse.Namespace) -> int:
    from utils.export.target import export_target

    if args.backend == "optimum" and (args.downsample_mode or args.max_slice_nums):
        print("error: --downsample-mode and --max-slice-nums need --backend suite (optimum-cli exports the files' "
              "settings)", file=sys.stderr)
        return 2
    return _run(args, lambda: export_target(args.model, args.out, draft=args.draft,
                                            hidden_layer_ids=args.hidden_layer_ids, verify_length=args.verify_length,
                                            prefill_chunk=args.prefill_chunk, weight_format=args.weight_format,
                                            downsample_mode=args.downsample_mode,
                                            max_slice_nums=args.max_slice_nums, overwrite=args.overwrite))


def _add_common_arguments(parser, *, weight_formats: tuple[str, ...], model_help: str) -> None:
    parser.add_argument("--model", metavar="DIR", type=existing_dir, required=True, help=model_help)
    parser.add_argument("--out", metavar="DIR", required=True, help="the folder to create")
    parser.add_argument("--weight-format", choices=weight_formats, default="fp32",
                        help="fp32/fp16 weights, or NNCF's int8/int4 weight compression")
    parser.add_argument("--backend", choices=("suite", "optimum"), default="suite",
                        help="suite: our exporter; optimum: optimum-cli, where it supports the model")
    parser.add_argument("--overwrite", action="store_true", help="replace the --out folder if it exists")


def add_target_command(subparsers, formatter=argparse.HelpFormatter) -> None:
    """Registers `target`: export a MiniCPM-OCR folder to OpenVINO IR."""
    parser = subparsers.add_parser("target", formatter_class=formatter, help="export a MiniCPM-OCR target to OpenVINO IR",
                                   description="Writes the vision, embedding and language-model IRs (with "
                                               "rollback for speculative decoding), the tokenizer IRs and the "
                                               "configs into DIR, atomically.")
    _add_common_arguments(parser, weight_formats=WEIGHT_FORMATS,
                          model_help="the MiniCPM-OCR folder (config.json, model.safetensors, tokenizer, ...)")
    parser.add_argument("--draft", metavar="DIR", type=existing_dir,
                        help="the DSpark draft folder whose target layers and block size the IR serves")
    parser.add_argument("--hidden-layer-ids", metavar="N", type=int_at_least(0), nargs="+",
                        help="target layers to output (default: the draft's)")
    parser.add_argument("--verify-length", metavar="N", type=int_at_least(2),
                        help="tokens per verification (default: draft block size + 1)")
    parser.add_argument("--prefill-chunk", metavar="N", type=int_at_least(1), default=DEFAULT_PREFILL_CHUNK,
                        help="tokens per prefill call")
    parser.add_argument("--downsample-mode", choices=DOWNSAMPLE_MODES,
                        help="image tokens per 2x2 (4x) or 4x4 (16x) patches (default: the checkpoint's own; 4x for "
                             "openbmb/MiniCPM-OCR-1.0, its model card's recipe)")
    parser.add_argument("--max-slice-nums", metavar="N", type=int_at_least(1),
                        help="the most slices of a page (default: the checkpoint's own; 9 for openbmb/MiniCPM-OCR-1.0)")
    parser.set_defaults(handler=_run_target)


def add_draft_command(subparsers, formatter=argparse.HelpFormatter) -> None:
    """Registers `draft`: export a DSpark draft folder to OpenVINO IR."""
    parser = subparsers.add_parser("draft", formatter_class=formatter, help="export a DSpark draft (pruned vocabulary) to OpenVINO IR",
                                   description=f"Validates the draft, then writes {DRAFT_MODEL}, "
                                               f"{MARKOV_HEAD_MODEL}, config.json and "
                                               "local-to-target.json into DIR, atomically.")
    _add_common_arguments(parser, weight_formats=WEIGHT_FORMATS,
                          model_help="the draft folder (config.json, model.safetensors, ...)")
    parser.add_argument("--drafts-per-step", metavar="N", type=int_at_least(1),
                        help="drafts per step (the block's positions), instead of the count config.json states "
                             "(utils.checkpoint.config says in which order its fields are read)")
    parser.set_defaults(handler=_run_draft)


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and runs the chosen subcommand; returns its exit code."""
    parser = command_parser(PROG.removeprefix("python -m "), __doc__.split("\n\n", 2)[2].rsplit("\n\n", 1)[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="{target,draft}")
    add_target_command(subparsers, parser.formatter_class)
    add_draft_command(subparsers, parser.formatter_class)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
