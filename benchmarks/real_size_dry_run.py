"""A real-size dry run: what exporting and running the real pair costs here, with random weights of its sizes.

A random `MiniCPMOcrForConditionalGeneration` of MiniCPM-OCR 1.0's configuration (text model and vision tower,
`benchmarks.real_size_model`) and a random DSpark draft of the published layout go through the suite's own
path: `export_draft` for each weight format and `export_target` for each weight format and image mode, then the
OCR pipeline (`SpeculativeOcrPipeline`, CPU, default precision) reading a page, target-only and speculative. Every
export and every pipeline run is a fresh Python process, so each peak RSS is its own.

The page is a full A4 page at 150 dpi (`FULL_PAGE_SIZE`, the sample pages' lines stacked on it), read at each
`--modes` with `--max-slice-nums` slices: by default 4x with 9 slices (the model card's serving recipe) beside 16x,
so the table shows what the recipe's four times as many image tokens cost in memory and time to first token.
`--context N` reads instead a sample page enlarged and a prompt lengthened to about N tokens.

The random weights make the answers meaningless: the run counts tokens (it never detokenizes ids the borrowed
tiny tokenizer does not know) and does not stop at EOS. Acceptance means nothing here (a random target may repeat
one token, which the random draft then guesses), so the speculative row shows what a speculative step costs and
holds, not a speedup.

    python -m benchmarks.real_size_dry_run [--formats fp16 int8 int4] [--modes 4x 16x] [--max-slice-nums N]
                                           [--work DIR] [--context N] [--new-tokens N] [--keep] [--scale real|small]

`--scale small` shrinks layers, widths and vocabulary (one format in 1-2 min, for tests). At real
scale one format takes 15-30 min on the shared 2-core machine; wrap it in `flock /tmp/realsize.lock`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import BLOCK_SIZE, peak_resident_bytes
from utils.cli import command_parser, int_at_least
from utils.contract import WEIGHT_FORMATS
from utils.contract.processor import DOWNSAMPLE_MODES

__all__ = ["SCALES", "COLUMNS", "FULL_PAGE_SIZE", "full_page", "run_stage", "format_table", "main"]

SCALES = ("real", "small")
# column -> (row key, format, unit the value is divided by); a step without the key shows "-"
_CELLS = {"disk (MB)": ("disk_bytes", ",.1f", 1e6), "peak RSS (MB)": ("peak_rss_bytes", ",.0f", 1e6),
          "export / load (s)": ("seconds", ".1f", 1), "context tokens": ("context_tokens", "d", 1),
          "image tokens": ("image_tokens", "d", 1), "TTFT (s)": ("ttft", ".2f", 1),
          "vision (s)": ("vision_seconds", ".2f", 1), "prefill (s)": ("prefill_seconds", ".2f", 1),
          "decode tok/s": ("decode_tokens_per_s", ".2f", 1), "tokens/step": ("tokens_per_step", ".2f", 1)}
COLUMNS = ("step", *_CELLS)
CONFIDENCE_THRESHOLD = 0.0  # verify every draft: a step's full cost, whatever the random confidences say
PAGE_UPSCALE_LIMIT = 8  # the page is enlarged at most this much to fill the context with image tokens
FULL_PAGE_SIZE = (1240, 1754)  # A4 at 150 dpi, (width, height)
RECIPE_SLICES = 9  # the model card's max_slice_nums
STDERR = 2  # the children's output goes to the parent's stderr: stdout holds only the tables
_REPO_ROOT = Path(__file__).resolve().parent.parent
_CHILD = "import sys; from benchmarks.real_size_dry_run import run_stage; run_stage(sys.argv[1])"

# --scale small: sizes that keep every code path (hybrid layers, window merger, pruned draft vocabulary)
_SMALL_TEXT = {"vocab_size": 2048, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "linear_num_key_heads": 2,
               "linear_num_value_heads": 4, "linear_key_head_dim": 32, "linear_value_head_dim": 32}
_SMALL_MROPE_SECTION = [2, 1, 1]  # rotary pairs of head_dim 32 x partial_rotary_factor 0.25
_SMALL_VISION = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                 "patch_size": 14, "insert_layer_id": 0}
_SMALL_IMAGE_PROCESSOR = {"scale_resolution": 112, "max_slice_nums": 2, "patch_size": 14}
_SMALL_DRAFT = {"num_hidden_layers": 1, "draft_vocab_size": 512}
_SMALL_DFLASH = {"target_layer_ids": [0, 2], "markov_rank": 16}


def _scaled_configs(scale: str):
    """(text config, vision config, image-processor fields, draft config.json) of one --scale."""
    from benchmarks.real_size_model import (real_size_draft_config, real_size_image_processor,
                                            real_size_text_config, real_size_vision_config)

    text, vision = real_size_text_config(), real_size_vision_config()
    if scale == "real":
        draft = real_size_draft_config(text, block_size=BLOCK_SIZE, mask_token_id=text.vocab_size - 1)
        return text, vision, real_size_image_processor(vision), draft
    layer_types = text.layer_types[:_SMALL_TEXT["num_hidden_layers"]]
    rope = text.rope_parameters | {"mrope_section": _SMALL_MROPE_SECTION}
    text = type(text)(**(text.to_dict() | _SMALL_TEXT | {"layer_types": layer_types, "rope_parameters": rope}))
    vision = type(vision)(**(vision.to_dict() | _SMALL_VISION))
    draft = real_size_draft_config(text, block_size=BLOCK_SIZE, mask_token_id=text.vocab_size - 1) | _SMALL_DRAFT
    draft["dflash_config"] |= _SMALL_DFLASH
    return text, vision, _SMALL_IMAGE_PROCESSOR, draft


def _build(work: Path, scale: str) -> dict:
    """Writes the random target (transformers folder) and draft checkpoint below `work/source`."""
    from benchmarks.real_size_model import random_target_config, write_random_draft, write_random_target
    from utils.files import folder_size
    from utils.tiny import default_pair

    text, vision, processor, draft_config = _scaled_configs(scale)
    tiny_target = default_pair().target
    target, draft = work / "source" / "target", work / "source" / "draft"
    target.mkdir(parents=True)
    draft.mkdir()
    parameters = write_random_target(target, random_target_config(text, vision, tokenizer_folder=tiny_target),
                                     tokenizer_folder=tiny_target, image_processor=processor)
    parameters["draft"] = write_random_draft(draft, draft_config)
    vision_fields = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "patch_size",
                     "image_size", "insert_layer_id", "window_kernel_size")
    return {"parameters": parameters, "vision": {key: getattr(vision, key) for key in vision_fields},
            "image_processor": processor, "disk": {"target": folder_size(target), "draft": folder_size(draft)}}


def _target_folder(work: Path, weight_format: str, mode: str) -> Path:
    return work / weight_format / f"target-{mode}"


def _export(work: Path, part: str, weight_format: str, mode: str | None = None, max_slice_nums: int | None = None
            ) -> dict:
    """Exports the random draft of `work/source` to `work/<format>/draft`, or its target (in `mode`, with
    `max_slice_nums`) to `work/<format>/target-<mode>`."""
    from utils.export.draft import export_draft
    from utils.export.target import export_target
    from utils.files import folder_size

    source = work / "source"
    if part == "target":
        out = _target_folder(work, weight_format, mode)
        export_target(source / "target", out, draft=source / "draft", weight_format=weight_format,
                      downsample_mode=mode, max_slice_nums=max_slice_nums)
    else:
        out = work / weight_format / "draft"
        export_draft(source / "draft", out, weight_format=weight_format)
    return {"disk": folder_size(out)}


def _prompt_length(pipeline, image, prompt: str) -> int:
    """Tokens of the prompt the pipeline would build for `image` and `prompt` (no vision inference)."""
    inputs = pipeline.preprocess(image)
    text = pipeline.build_prompt([inputs.placeholder], prompt=prompt)
    return len(pipeline.tokenizer.encode(text, add_special_tokens=False).input_ids.data[0])


def full_page():
    """An A4 page at 150 dpi (`FULL_PAGE_SIZE`) covered with the printed sample pages' lines, each scaled to the
    page's width, top to bottom."""
    from PIL import Image

    from utils.pages.samples import printed_sample_pages

    page = Image.new("RGB", FULL_PAGE_SIZE, "white")
    lines, top = printed_sample_pages(), 0
    while top < page.height:
        for line in lines:
            width = page.width - 40
            scaled = line.image.convert("RGB").resize((width, round(line.image.height * width / line.image.width)),
                                                      Image.Resampling.BICUBIC)
            page.paste(scaled, (20, top))
            top += scaled.height
            if top >= page.height:
                break
    return page


def _page_for_context(pipeline, context: int):
    """(image, prompt) of about `context` tokens: the first printed sample page, enlarged while its prompt fits (the
    image processor slices a larger page into more tiles), then the instruction lengthened with corpus text."""
    from PIL import Image

    from utils.pages.samples import CORPUS_PATH, printed_sample_pages
    from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT

    page = printed_sample_pages()[0].image
    image = page
    for factor in range(2, PAGE_UPSCALE_LIMIT + 1):
        larger = page.resize((page.width * factor, page.height * factor), Image.Resampling.BICUBIC)
        if _prompt_length(pipeline, larger, DEFAULT_PROMPT) > context:
            break
        image = larger
    missing = context - _prompt_length(pipeline, image, DEFAULT_PROMPT)
    if missing <= 0:
        return image, DEFAULT_PROMPT
    corpus = list(pipeline.tokenizer.encode(CORPUS_PATH.read_text(), add_special_tokens=False).input_ids.data[0])
    filler = (corpus * (missing // len(corpus) + 1))[:missing]
    return image, f"{DEFAULT_PROMPT}\n{pipeline.tokenizer.decode(filler)}"


def _run_pipeline(work: Path, weight_format: str, *, mode: str, speculative: bool, context: int | None,
                  new_tokens: int) -> dict:
    """Loads the pipeline, reads one page twice (a warm-up, then the measured run) and reports the second."""
    from utils.engine.decoder import SpeculativeDecoder
    from utils.engine.timing import StageTimer
    from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    start = time.perf_counter()
    draft = work / weight_format / "draft" if speculative else None
    pipeline = SpeculativeOcrPipeline(_target_folder(work, weight_format, mode), draft, device="CPU")
    load_seconds = time.perf_counter() - start
    room = pipeline.language_model.max_length - new_tokens - pipeline.language_model.verify_length
    if context is not None and context > room:
        raise ValueError(f"--context={context} leaves no room for --new-tokens={new_tokens}: the language model "
                         f"holds {pipeline.language_model.max_length} tokens; supported: --context <= {room}")
    image, prompt = (full_page(), DEFAULT_PROMPT) if context is None else _page_for_context(pipeline, context)
    decoder = SpeculativeDecoder(pipeline.language_model, pipeline.embed, stop_token_ids=(),  # random: never stop
                                 proposer=pipeline.proposer, block_size=pipeline.block_size)

    def read_page(max_new_tokens: int):
        timer = StageTimer()  # started before the vision stage: the TTFT counts from the request
        embeds = pipeline.prompt_embeddings(image, prompt, timer)
        decoded = decoder.generate(embeds, max_new_tokens=max_new_tokens, timer=timer,
                                   confidence_threshold=CONFIDENCE_THRESHOLD)
        return len(embeds), decoded.metrics

    read_page(2)
    context_tokens, metrics = read_page(new_tokens)
    return {"load_seconds": load_seconds, "context_tokens": context_tokens,
            "image_tokens": pipeline.preprocess(image).num_image_tokens, "ttft": metrics.ttft,
            "vision_seconds": metrics.stage_seconds["vision"], "prefill_seconds": metrics.stage_seconds["prefill"],
            "decode_tokens_per_s": metrics.decode_tokens_per_s, "tokens": metrics.num_generated_tokens,
            "tokens_per_step": metrics.mean_tokens_per_step, "inference_precision": pipeline.inference_precision,
            "load_average": os.getloadavg()[0]}


def run_stage(request: str) -> None:
    """Runs one stage (the JSON `request`) in this process and writes its result, with the peak RSS and the
    seconds it took, to the request's "result" file. The children of `main` call it."""
    options = json.loads(request)
    work, stage = Path(options["work"]), options["stage"]
    start = time.perf_counter()
    if stage == "build":
        result = _build(work, options["scale"])
    elif stage == "export":
        result = _export(work, options["part"], options["weight_format"], options.get("mode"),
                         options.get("max_slice_nums"))
    elif stage == "run":
        result = _run_pipeline(work, options["weight_format"], mode=options["mode"], speculative=options["speculative"],
                               context=options["context"], new_tokens=options["new_tokens"])
    else:
        raise ValueError(f"stage={stage!r}: supported: build, export, run")
    result |= {"seconds": time.perf_counter() - start, "peak_rss": peak_resident_bytes()}
    Path(options["result"]).write_text(json.dumps(result) + "\n")


def _in_child(work: Path, stage: str, **options) -> dict:
    """`run_stage` in a fresh Python process; its result."""
    result = work / f".{stage}-{time.monotonic_ns()}.json"
    request = json.dumps({"work": str(work), "stage": stage, "result": str(result)} | options)
    completed = subprocess.run([sys.executable, "-c", _CHILD, request], cwd=_REPO_ROOT, stdout=STDERR)
    if completed.returncode != 0:
        raise RuntimeError(f"stage {stage} {options} failed with exit code {completed.returncode} (its output is "
                           f"above on stderr)")
    answer = json.loads(result.read_text())
    result.unlink()
    return answer


def measure_format(work: Path, weight_format: str, *, modes: list[str], max_slice_nums: int, context: int | None,
                   new_tokens: int, progress) -> list[dict]:
    """The rows of one weight format: export the draft; per image mode, export the target, then run target-only
    and speculative."""
    def export(part: str, **options) -> dict:
        label = f"export {part}" + (f" ({options['mode']})" if "mode" in options else "")
        progress.set_postfix_str(f"{weight_format}: {label}")
        result = _in_child(work, "export", part=part, weight_format=weight_format, **options)
        progress.update()
        return {"step": label, "disk_bytes": result["disk"], "peak_rss_bytes": result["peak_rss"],
                "seconds": result["seconds"]}

    rows = [export("draft")]
    for mode in modes:
        rows.append(export("target", mode=mode, max_slice_nums=max_slice_nums))
        for speculative in (False, True):
            name = f"{'speculative (random draft)' if speculative else 'target only'} ({mode})"
            progress.set_postfix_str(f"{weight_format}: {name}")
            result = _in_child(work, "run", weight_format=weight_format, mode=mode, speculative=speculative,
                               context=context, new_tokens=new_tokens)
            rows.append({"step": f"pipeline, {name}", "peak_rss_bytes": result["peak_rss"],
                         "seconds": result["load_seconds"]} | {key: result[key] for key in (
                             "context_tokens", "image_tokens", "ttft", "vision_seconds", "prefill_seconds",
                             "decode_tokens_per_s", "tokens", "tokens_per_step", "inference_precision",
                             "load_average")})
            progress.update()
    return rows


def _cell(row: dict, column: str) -> str:
    key, spec, unit = _CELLS[column]
    if key not in row:
        return "-"
    return format(row[key] if unit == 1 else row[key] / unit, spec)


def format_table(weight_format: str, rows: list[dict]) -> str:
    """The markdown table of one weight format (`COLUMNS`)."""
    lines = [f"### {weight_format} weights", "", "| " + " | ".join(COLUMNS) + " |",
             "|---|" + "---:|" * len(_CELLS)]
    lines += ["| " + " | ".join([row["step"], *(_cell(row, column) for column in _CELLS)]) + " |" for row in rows]
    return "\n".join(lines)


def _describe(built: dict, args: argparse.Namespace) -> str:
    parameters = built["parameters"]
    page = (f"a full page ({FULL_PAGE_SIZE[0]} x {FULL_PAGE_SIZE[1]} px) and the default prompt"
            if args.context is None else f"a sample page enlarged and a prompt filled to ~{args.context} tokens")
    return "\n".join([
        f"## Real-size dry run ({args.scale} scale): random weights, the suite's exporters and pipeline",
        "",
        f"Random target: {parameters['text'] / 1e6:.1f}M text + {parameters['vision'] / 1e6:.1f}M vision parameters "
        f"(saved in bf16: {built['disk']['target'] / 1e6:,.1f} MB); random DSpark draft: "
        f"{parameters['draft'] / 1e6:.1f}M parameters ({built['disk']['draft'] / 1e6:,.1f} MB). Building them took "
        f"{built['seconds']:.0f} s and {built['peak_rss'] / 1e6:,.0f} MB peak RSS.",
        f"Vision config: {built['vision']}; image processor: {built['image_processor']}.",
        f"Pipeline: CPU, default precision; {page}, read at {' and '.join(args.modes)} with max_slice_nums="
        f"{args.max_slice_nums}; {args.new_tokens} new tokens, no EOS stop; every draft verified (confidence threshold "
        f"{CONFIDENCE_THRESHOLD:g}); the second of two identical requests is measured.",
        "",
    ])


def _notes(tables: dict[str, list[dict]]) -> str:
    runs = [row for rows in tables.values() for row in rows if "ttft" in row]
    precisions = sorted({row["inference_precision"] for row in runs})
    loads = ", ".join(f"{row['load_average']:.1f}" for row in runs)
    return "\n".join([
        "",
        "Target and draft are random: a random target may repeat one token, which the random draft then guesses, "
        "so tokens/step is no measure of the real pair; the speculative row measures what a speculative step costs "
        "(draft + Markov head + verifying every draft), not a speedup. Acceptance here is meaningless; the point "
        "is cost and memory.",
        "disk: the exported folder; peak RSS: the process that exported or ran (each its own); export / load: "
        "seconds to export, or to load and compile the pipeline; TTFT: request to first token (vision, prefill and "
        "the host work around them); decode tok/s: tokens after the first per second. "
        f"Inference precision: {', '.join(precisions)}.",
        f"The CPU is shared: 1-min load average at the end of each run: {loads} ({os.cpu_count()} cores).",
    ])


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser("benchmarks.real_size_dry_run", __doc__)
    parser.add_argument("--formats", nargs="+", default=["fp16", "int8", "int4"], choices=WEIGHT_FORMATS,
                        help="weight formats to export and run")
    parser.add_argument("--work", metavar="DIR", type=Path,
                        help="folder for the models and IRs (a new folder inside it; default: the system's "
                             "temporary folder); deleted at the end unless --keep")
    parser.add_argument("--modes", nargs="+", default=list(DOWNSAMPLE_MODES), choices=DOWNSAMPLE_MODES,
                        help="image modes to export the target in and run (default: 4x, the recipe, and 16x)")
    parser.add_argument("--max-slice-nums", metavar="N", type=int_at_least(1), default=RECIPE_SLICES,
                        help="the most slices of a page (default: the model card's 9)")
    parser.add_argument("--context", metavar="N", type=int_at_least(1),
                        help="read a page and prompt of about this many tokens instead of a full page")
    parser.add_argument("--new-tokens", metavar="N", type=int_at_least(2), default=64,
                        help="tokens generated per run, at least 2 (decode tok/s counts the tokens after the first)")
    parser.add_argument("--keep", action="store_true", help="keep the models and IRs")
    parser.add_argument("--scale", choices=SCALES, default="real",
                        help="real: MiniCPM-OCR 1.0's sizes; small: a few-MB stand-in (1-2 min per format)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    """Builds the random pair, exports and runs it per weight format, prints a table per format.

    Returns:
        weight format -> its rows (numbers in bytes, seconds and tokens).
    """
    from tqdm.auto import tqdm

    args = _parse_args(argv)
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="real-size-dry-run-", dir=args.work)).resolve()
    tables = {}
    try:
        print(f"building the random pair ({args.scale} scale) in {work} ...", file=sys.stderr, flush=True)
        built = _in_child(work, "build", scale=args.scale)
        print(_describe(built, args), flush=True)
        with tqdm(total=(1 + 3 * len(args.modes)) * len(args.formats), desc="dry run", unit="step") as progress:
            for weight_format in args.formats:
                tables[weight_format] = measure_format(work, weight_format, modes=args.modes,
                                                       max_slice_nums=args.max_slice_nums, context=args.context,
                                                       new_tokens=args.new_tokens, progress=progress)
                print(format_table(weight_format, tables[weight_format]) + "\n", flush=True)
                if not args.keep:
                    shutil.rmtree(work / weight_format)
        print(_notes(tables), flush=True)
    finally:
        if args.keep:
            print(f"kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return tables


if __name__ == "__main__":
    main()
