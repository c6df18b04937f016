"""Command line: speculative OCR of an image, a PDF or a whole archive of them on OpenVINO.

    python -m utils.ocr FILE [--pages RANGE] [--target DIR] [--draft DIR|none] [--prompt TEXT]
                             [--max-new-tokens N] [--num-assistant-tokens N] [--markov-head on|off]
                             [--markov-head-top-k N]
                             [--confidence-threshold P] [--step-cost MS MS] [--device DEVICE]
                             [--precision f32|default] [--draft-precision f32|default]
                             [--chat-template-kwargs JSON] [--json [FILE]]
    python -m utils.ocr FILE|FOLDER ... --out RESULTS.jsonl [--workers N | --ray [ADDRESS]] [--retry-failed]
                             [--export-text DIR] [--quiet] [the options above but --pages]
    python -m utils.ocr --out RESULTS.jsonl --export-text DIR

FILE is an image, or a PDF whose pages (all, or --pages) are rendered and read in order. With --out, every
image and PDF page of the FILEs and FOLDERs given (folders walked, sorted, hidden files skipped) is read into
one JSON line per page of RESULTS.jsonl, appended as each page is read; a page that cannot be read is an error
line and the run goes on (exit status 1 at the end). A file reached twice, or a copy of an earlier one, is read
once. Run the same command again to resume, after a crash or Ctrl-C (exit status 130): pages with a line are
skipped, a changed file is read again. --workers N reads on N processes, --ray on Ray actors (this machine, or a
cluster's ADDRESS / $RAY_ADDRESS); the pipeline is compiled once per worker. --export-text DIR then writes one
text file per document of RESULTS.jsonl (FILEs and FOLDERs read first, if given). With no --target it reads
the shipped tiny pair's IR (utils/tiny/default/ov), exporting the pair into the suite's model cache once
(`models/` at the repository root, or $DSPARK_OCR_MODELS) only when that IR is not of the files beside it;
every argument and the input are checked before that.
`--precision f32` makes the output equal target-only decoding token for token; `default` runs the device's
own precision (bf16 on CPUs that have it, f16 on GPUs), faster, where a near-tie between the target's top
candidates may flip.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from utils.cli import (add_json_option, command_parser, existing_dir, existing_path, float_between, int_at_least,
                       new_file, page_range, process_seconds, write_json)
from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD
from utils.engine.device import PRECISIONS
from utils.engine.draft import PER_POSITION_ARGMAX
from utils.engine.step_cost import StepCost
from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT

__all__ = ["main"]


def _json_object(text: str) -> dict:
    """An argparse type: a JSON object, or an error naming what was wrong."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON ({error}): {text!r}") from error
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {type(value).__name__}: {text!r}")
    return value


def _draft_folder(text: str):
    """An argparse type: an existing draft folder, or 'none'."""
    return text if text == "none" else existing_dir(text)


def _parser() -> argparse.ArgumentParser:
    parser = command_parser("utils.ocr", __doc__.split("\n\n", 2)[2])
    parser.add_argument("inputs", metavar="FILE", type=existing_path, nargs="*",
                        help="the page to read: an image, or a PDF; with --out, any number of files and folders "
                             "(none with --export-text: export only)")
    parser.add_argument("--pages", metavar="RANGE", type=page_range,
                        help="the PDF's pages to read, N or FIRST-LAST counted from 1 (default: all)")
    parser.add_argument("--target", metavar="DIR", type=existing_dir,
                        help="target IR folder (default: the shipped tiny pair's IR)")
    parser.add_argument("--draft", metavar="DIR", type=_draft_folder,
                        help="draft IR folder, or 'none' for target-only decoding "
                             "(default: the tiny draft when --target is not given, else none)")
    parser.add_argument("--prompt", metavar="TEXT", default=DEFAULT_PROMPT, help="the instruction after the image")
    parser.add_argument("--max-new-tokens", metavar="N", type=int_at_least(1), default=512,
                        help="the most tokens to write per page")
    parser.add_argument("--num-assistant-tokens", metavar="N", type=int_at_least(1),
                        help="drafts verified per step (default: the draft's block size)")
    parser.add_argument("--markov-head", choices=("on", "off"), default="on",
                        help="off: draft each block position's own best token, without the Markov walk (DFlash's "
                             "way), to compare with DSpark's; the text stays the target's")
    parser.add_argument("--markov-head-top-k", metavar="N", type=int_at_least(0),
                        help="K of the Top-K candidate scorer; 0 = dense walk (default: min(64, draft vocabulary))")
    parser.add_argument("--confidence-threshold", metavar="P", type=float_between(0.0, 1.0),
                        default=DEFAULT_CONFIDENCE_THRESHOLD,
                        help="verify only the drafts the confidence head trusts this much, 0 to 1 (0: all)")
    parser.add_argument("--step-cost", metavar="MS", type=float, nargs=2,
                        help="this device's cost of a speculative step: fixed ms, and ms per verified draft "
                             "(benchmarks.cpu_speedup prints them); then verify only as many of the trusted drafts "
                             "as pay for themselves (default: all of them)")
    parser.add_argument("--device", metavar="DEVICE", help="CPU, GPU or AUTO (default: GPU when present)")
    parser.add_argument("--precision", choices=PRECISIONS, default="default",
                        help="f32: exact, equal to target-only output; default: the device's own (bf16/f16), faster")
    parser.add_argument("--draft-precision", choices=PRECISIONS, default="default",
                        help="the draft's precision, independent of the target's (never changes the output): "
                             "default: the device's own, faster; f32: acceptance as on every machine")
    parser.add_argument("--chat-template-kwargs", metavar="JSON", type=_json_object,
                        help="chat-template arguments as a JSON object, e.g. '{\"enable_thinking\": true}' "
                             "(default: non-thinking mode when the template has the switch, as the serving recipe)")
    add_json_option(parser, what="the text, token ids and metrics (one result per PDF page); with --out, the "
                                 "summary", stdout=True)
    archive = parser.add_argument_group("archives (several files, folders)")
    archive.add_argument("--out", metavar="FILE", type=new_file,
                         help="the JSON Lines file of an archive's records, one per page, appended to (resumes)")
    archive.add_argument("--workers", metavar="N", type=int_at_least(1), default=1,
                         help="processes reading pages, each with its own pipeline and a share of the cores")
    archive.add_argument("--ray", metavar="ADDRESS", nargs="?", const="",
                         help="read on --workers Ray actors (one unless --workers says more): local Ray, or the cluster at "
                              "ADDRESS (or $RAY_ADDRESS)")
    archive.add_argument("--retry-failed", action="store_true", help="read again the pages whose records are errors")
    archive.add_argument("--export-text", metavar="DIR", type=_text_folder,
                         help="write one text file per document of --out into DIR (created if missing), from the "
                              "latest record of each page, pages in order, a PDF's separated by a form feed")
    archive.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _text_folder(text: str) -> Path:
    """An argparse type: a folder to write texts into, which may exist."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    return path


def _check_archive_arguments(parser, args) -> None:
    """One FILE reads as always; more files, a folder, workers, Ray or a text export need --out (checked before any
    export); only a text export needs no FILE."""
    if not args.inputs and args.export_text is None:
        parser.error("the following arguments are required: FILE")
    args.file = args.inputs[0] if args.inputs else None
    archive_only = [name for name, given in (("several inputs", len(args.inputs) > 1),
                                             ("a folder", args.file is not None and args.file.is_dir()),
                                             ("--workers", args.workers > 1), ("--ray", args.ray is not None),
                                             ("--retry-failed", args.retry_failed),
                                             ("--export-text", args.export_text is not None))
                    if given]
    if archive_only and args.out is None:
        parser.error(f"{archive_only[0]} needs --out RESULTS.jsonl: an archive is read into one record per page")
    if args.out is not None and args.pages is not None:
        parser.error("--pages reads pages of one PDF; with --out every page of every file is read")


def _check_markov_head(parser, args) -> None:
    """--markov-head off drafts with the Top-1 scorer, the per-position argmax (recorded as such in archives)."""
    if args.markov_head == "on":
        return
    if args.markov_head_top_k not in (None, PER_POSITION_ARGMAX):
        parser.error(f"--markov-head-top-k {args.markov_head_top_k} chooses a Markov walk, and --markov-head is off: "
                     "give one or the other")
    args.markov_head_top_k = PER_POSITION_ARGMAX


def _input_pages(args) -> tuple[list[int | None], Callable, Callable[[], None]]:
    """(page numbers, number -> image, close) of FILE, checked now: a PDF's pages or the one image (None)."""
    from utils.pipeline.preprocessing.image_io import load_rgb_image
    from utils.pipeline.preprocessing.pdf import PdfPages, is_pdf

    if is_pdf(args.file):
        document = PdfPages(args.file)
        try:
            return list(document.numbers(args.pages)), document.render, document.close
        except ValueError:
            document.close()
            raise
    if args.pages is not None:
        raise ValueError(f"--pages reads pages of a PDF, and {args.file} is not one")
    image = load_rgb_image(args.file)
    return [None], lambda _: image, lambda: None


def _read_archive(args, started: float) -> int:
    """Reads every page of the inputs into --out, then exports its texts if asked: 0 when every page was read, 1
    when some failed, 130 on Ctrl-C (one line saying how far the run came)."""
    try:
        code = _read_inputs(args, started) if args.inputs else 0
    except KeyboardInterrupt as stop:  # `ArchiveInterrupted` says how many pages were read
        print(str(stop) or "interrupted before any page was read; run the same command to resume", file=sys.stderr)
        return 130
    if args.export_text is not None:
        from utils.archive.results import read_results
        from utils.archive.texts import export_texts

        exported = export_texts(read_results(args.out), args.export_text)
        if args.json and not args.inputs:
            write_json(args.json, asdict(exported))
        print(exported, file=sys.stderr)
    return code


def _read_inputs(args, started: float) -> int:
    from utils.archive import ReadSettings, read_inputs
    from utils.archive.pages import archive_files
    from utils.archive.ray_workers import check_ray_address
    from utils.archive.workers import oversubscription
    from utils.models import compiled_cache_dir

    archive_files(args.inputs)  # names and folders checked before the tiny pair may be exported
    if args.ray is not None:
        check_ray_address(args.ray or None)
    on_this_machine = args.ray is None or not (args.ray or os.environ.get("RAY_ADDRESS"))
    if args.ray is not None and args.workers == 1:
        print("reading on one Ray actor: --workers N starts N (Ray takes seconds to start; on one machine "
              "--workers N without --ray reads as fast)", file=sys.stderr)
    if on_this_machine and (warning := oversubscription(args.workers)):
        print(warning, file=sys.stderr)
    target, draft = _model_folders(args)
    settings = ReadSettings(target, draft, device=args.device, precision=args.precision,
                            draft_precision=args.draft_precision, prompt=args.prompt,
                            max_new_tokens=args.max_new_tokens, num_assistant_tokens=args.num_assistant_tokens,
                            markov_head_top_k=args.markov_head_top_k, confidence_threshold=args.confidence_threshold,
                            step_cost=args.step_cost and (args.step_cost.fixed_ms, args.step_cost.per_draft_ms),
                            chat_template_kwargs=args.chat_template_kwargs, cache_dir=str(compiled_cache_dir()))
    summary = read_inputs(args.inputs, args.out, settings, workers=args.workers, ray=args.ray,
                          retry_failed=args.retry_failed, progress=not (args.quiet or args.json), started=started)
    if args.json:
        write_json(args.json, summary.as_dict())
    else:
        print(summary, file=sys.stderr)
    return 0 if summary.complete else 1


def _model_folders(args) -> tuple[str, str | None]:
    if args.target is None:
        from utils.models import default_ir_pair

        target, draft = default_ir_pair()
        draft = None if args.draft == "none" else (args.draft or draft)
        return str(target), draft and str(draft)
    return str(args.target), None if args.draft in (None, "none") else str(args.draft)


def _as_dict(result, pipeline, args, draft) -> dict:
    return {"text": result.texts[0], "tokens": result.tokens, "device": pipeline.device,
            "precision": args.precision, "inference_precision": pipeline.inference_precision,
            "draft_precision": args.draft_precision, "draft_inference_precision": pipeline.draft_inference_precision,
            "draft": draft, "notice": result.notice, "metrics": result.metrics.as_dict()}


def _summary(metrics, pipeline, args) -> str:
    return (f"{metrics.num_generated_tokens} tokens in {metrics.num_steps} steps "
            f"({metrics.mean_tokens_per_step:.2f} tokens/step), {metrics.decode_tokens_per_s:.1f} tokens/s "
            f"decode, first token after {metrics.ttft * 1000:.0f} ms, on {pipeline.device} "
            f"({pipeline.inference_precision or args.precision})")


def _read(pipeline, args, numbers, render) -> list:
    """Reads the pages in order: one image streams its text; a PDF's pages advance a progress bar."""
    from tqdm.auto import tqdm

    settings = dict(max_new_tokens=args.max_new_tokens, num_assistant_tokens=args.num_assistant_tokens,
                    markov_head_top_k=args.markov_head_top_k, confidence_threshold=args.confidence_threshold,
                    step_cost=args.step_cost)
    if numbers == [None]:
        streamer = None if args.json else (lambda text: print(text, end="", flush=True))
        results = [pipeline.generate(render(None), args.prompt, streamer=streamer, **settings)]
        if results[0].notice:
            print(("\n" if streamer else "") + results[0].notice, file=sys.stderr)
        return results
    results = []
    for number in tqdm(numbers, desc=str(args.file), unit="page", file=sys.stderr):
        results.append(pipeline.generate(render(number), args.prompt, **settings))
        if results[-1].notice:
            tqdm.write(f"page {number}: {results[-1].notice}", file=sys.stderr)
        if not args.json:
            tqdm.write(f"--- page {number} ---\n{results[-1].texts[0]}", file=sys.stdout)
    return results


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter() - process_seconds()  # an archive's wall time counts from here, export included
    parser = _parser()
    args = parser.parse_args(argv)
    _check_archive_arguments(parser, args)
    _check_markov_head(parser, args)
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    try:
        args.step_cost = None if args.step_cost is None else StepCost(*args.step_cost)
        if args.out is not None:
            return _read_archive(args, started)
        numbers, render, close = _input_pages(args)
        try:
            target, draft = _model_folders(args)
            pipeline = SpeculativeOcrPipeline(target, draft, device=args.device, precision=args.precision,
                                              draft_precision=args.draft_precision,
                                              chat_template_kwargs=args.chat_template_kwargs)
            results = _read(pipeline, args, numbers, render)
        finally:
            close()
    except (ValueError, FileNotFoundError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    if args.json and numbers == [None]:
        write_json(args.json, _as_dict(results[0], pipeline, args, draft))
    elif args.json:
        write_json(args.json, {"file": str(args.file), "pages": [
            {"page": number, **_as_dict(result, pipeline, args, draft)} for number, result in zip(numbers, results)]})
    else:
        print("\n", file=sys.stderr)
        for number, result in zip(numbers, results):
            print(("" if number is None else f"page {number}: ") + _summary(result.metrics, pipeline, args),
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
