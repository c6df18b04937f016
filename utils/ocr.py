"""Command line: speculative OCR of one image on OpenVINO.

    python -m utils.ocr IMAGE [--target DIR] [--draft DIR|none] [--prompt TEXT] [--max-new-tokens N]
                              [--num-assistant-tokens K] [--markov-head-top-k K] [--confidence-threshold P]
                              [--device D] [--precision f32|default] [--draft-precision f32|default]
                              [--chat-template-kwargs JSON] [--json]

With no --target it exports the shipped tiny pair into the suite's model cache once (`models/` at the
repository root, or $DSPARK_OCR_MODELS) and reuses it afterwards. `--precision f32` makes the output equal
target-only decoding token for token; `default` runs the device's own precision (bf16 on CPUs that have it,
f16 on GPUs), faster, where a near-tie between the target's top candidates may flip.
"""

from __future__ import annotations

import argparse
import json
import sys

from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD
from utils.engine.device import PRECISIONS
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m utils.ocr", description="Speculative OCR on OpenVINO.")
    parser.add_argument("image", help="image file to read")
    parser.add_argument("--target", help="target IR folder (default: the shipped tiny pair, exported on first use)")
    parser.add_argument("--draft", help="draft IR folder, or 'none' for target-only decoding "
                                        "(default: the tiny draft when --target is not given)")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--num-assistant-tokens", type=int, default=None, help="default: the draft's block size")
    parser.add_argument("--markov-head-top-k", type=int, default=None,
                        help="K of the Top-K candidate scorer; 0 = dense walk (default: min(64, draft vocab))")
    parser.add_argument("--confidence-threshold", type=float, default=DEFAULT_CONFIDENCE_THRESHOLD,
                        help="verify only the drafts the confidence head trusts this much (0: all)")
    parser.add_argument("--device", default=None, help="CPU, GPU or AUTO (default: GPU when present)")
    parser.add_argument("--precision", choices=PRECISIONS, default="default",
                        help="f32: exact, equal to target-only output; default: the device's own (bf16/f16), faster")
    parser.add_argument("--draft-precision", choices=PRECISIONS, default="default",
                        help="the draft's precision, independent of the target's (never changes the output): default: "
                             "the device's own, faster; f32: acceptance as on every machine")
    parser.add_argument("--chat-template-kwargs", type=_json_object, default=None,
                        help="chat-template arguments as a JSON object, e.g. '{\"enable_thinking\": true}' "
                             "(default: non-thinking mode when the template has the switch, as the serving recipe)")
    parser.add_argument("--json", action="store_true", help="print the text and metrics as one JSON object")
    return parser


def _model_folders(args) -> tuple[str, str | None]:
    if args.target is None:
        from utils.models import default_ir_pair

        target, draft = default_ir_pair()
        draft = None if args.draft == "none" else (args.draft or draft)
        return str(target), draft and str(draft)
    return args.target, None if args.draft in (None, "none") else args.draft


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    try:
        target, draft = _model_folders(args)
        pipeline = SpeculativeOcrPipeline(target, draft, device=args.device, precision=args.precision,
                                          draft_precision=args.draft_precision,
                                          chat_template_kwargs=args.chat_template_kwargs)
        streamer = None if args.json else (lambda text: print(text, end="", flush=True))
        result = pipeline.generate(args.image, args.prompt, max_new_tokens=args.max_new_tokens,
                                   num_assistant_tokens=args.num_assistant_tokens,
                                   markov_head_top_k=args.markov_head_top_k, streamer=streamer,
                                   confidence_threshold=args.confidence_threshold)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    metrics = result.metrics
    if args.json:
        print(json.dumps({"text": result.texts[0], "tokens": result.tokens, "device": pipeline.device,
                          "precision": args.precision, "inference_precision": pipeline.inference_precision,
                          "draft_precision": args.draft_precision,
                          "draft_inference_precision": pipeline.draft_inference_precision,
                          "draft": draft, "metrics": metrics.as_dict()}))
    else:
        print(f"\n\n{metrics.num_generated_tokens} tokens in {metrics.num_steps} steps "
              f"({metrics.mean_tokens_per_step:.2f} tokens/step), {metrics.decode_tokens_per_s:.1f} tokens/s "
              f"decode, first token after {metrics.ttft * 1000:.0f} ms, on {pipeline.device} "
              f"({pipeline.inference_precision or args.precision})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
