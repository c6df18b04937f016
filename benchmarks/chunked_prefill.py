"""A prompt in several calls at the default precision, at real size: as close to f32 as one call?

    python -m benchmarks.chunked_prefill [--tokens 512] [--calls 256 128 64] [--input-scale 16] [--decode 128]

Builds the random real-size text model with a trained model's margins (`benchmarks.real_size_model`:
`sharpen_margins`), exports its language model with calls long enough for the whole prompt, and prefills a prompt
of `--tokens` random token ids at f32 in one call, the reference; then at the device's default precision in one
call and in calls of each `--calls` size. It prints the largest error of the prompt's last logits and of every
position's hidden states against the reference, and, after each prefill, greedy decoding of `--decode` tokens at
the default precision: how many tokens equal the one-call decoding's before the first difference. Random ids stand
in for a page: the rounding is measured, not the text. 512 tokens take about 15 GB and 8 minutes on two cores; a
page's whole prompt at 4x with 9 slices (1,881 tokens) in one call did not fit in 24 GB (tracing a call that long).
"""

from __future__ import annotations

import gc
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.real_size_model import HIDDEN_LAYER_IDS, VERIFY_LENGTH, build_random_text_model, sharpen_margins
from utils.cli import command_parser, float_between, int_at_least

__all__ = ["main"]


def _export(folder: Path, *, tokens: int, input_scale: float, weight_format: str) -> np.ndarray:
    """Exports the sharpened random model (calls of up to `tokens`); returns its input embedding table."""
    from utils.export.language_model import export_language_model

    model = build_random_text_model(seed=0)
    sharpen_margins(model, input_scale=input_scale)
    table = model.get_input_embeddings().weight.detach().numpy().copy()
    report = export_language_model(model, folder, hidden_layer_ids=HIDDEN_LAYER_IDS, verify_length=VERIFY_LENGTH,
                                   prefill_chunk=tokens, weight_format=weight_format)
    print(f"exported ({weight_format}, calls of up to {tokens} tokens) in {report['export_seconds']:.0f} s", flush=True)
    del model
    gc.collect()
    return table


def _read(session, table: np.ndarray, prompt: np.ndarray, *, chunk: int, decode: int):
    """(last logits, hidden states, greedy tokens) after prefilling `prompt` in calls of `chunk`."""
    session.reset()
    session.prefill_chunk = chunk
    logits, hidden = session.prefill(table[prompt])
    first, tokens = logits, []
    for _ in range(decode):
        tokens.append(int(logits.argmax()))
        logits, _ = session.decode_one(table[tokens[-1]])
    return first, hidden, tokens


def _agreeing(tokens: list[int], reference: list[int]) -> int:
    """Tokens equal to the reference's before the first difference."""
    return next((index for index, (a, b) in enumerate(zip(tokens, reference)) if a != b), len(reference))


def main(argv: list[str] | None = None) -> None:
    from utils.engine.device import compile_properties, openvino_core
    from utils.engine.language_model import LanguageModelSession

    parser = command_parser("benchmarks.chunked_prefill", __doc__.split("\n\n", 2)[2])
    parser.add_argument("--tokens", metavar="N", type=int_at_least(2), default=512, help="prompt tokens")
    parser.add_argument("--calls", metavar="N", type=int_at_least(1), nargs="+", default=[256, 128, 64],
                        help="tokens per prefill call, each measured")
    parser.add_argument("--input-scale", metavar="X", type=float_between(1.0, 1000.0), default=16.0,
                        help="sharpen_margins' input scale (16: the benchmarks' trained-like margins)")
    parser.add_argument("--decode", metavar="N", type=int_at_least(0), default=128, help="greedy tokens after")
    parser.add_argument("--weight-format", choices=("fp32", "int8"), default="fp32", help="the IR's weights")
    args = parser.parse_args(argv)
    prompt = np.random.default_rng(0).integers(0, 248_000, size=args.tokens)
    with tempfile.TemporaryDirectory() as folder:
        table = _export(Path(folder), tokens=args.tokens, input_scale=args.input_scale,
                        weight_format=args.weight_format)
        length = args.tokens + args.decode + 1
        exact = LanguageModelSession(folder, properties=compile_properties("CPU", precision="f32"), max_length=length)
        reference_logits, reference_hidden, reference_tokens = _read(exact, table, prompt, chunk=args.tokens,
                                                                     decode=args.decode)
        del exact
        gc.collect()
        default = LanguageModelSession(folder, properties=compile_properties("CPU"), max_length=length)
        precision = openvino_core().get_property("CPU", "INFERENCE_PRECISION_HINT").to_string()
        rows, one_call_tokens = [], None
        for chunk in (args.tokens, *args.calls):
            logits, hidden, tokens = _read(default, table, prompt, chunk=chunk, decode=args.decode)
            one_call_tokens = one_call_tokens or tokens
            rows.append((chunk, np.abs(logits - reference_logits).max(), np.abs(hidden - reference_hidden).max(),
                         _agreeing(tokens, one_call_tokens), _agreeing(tokens, reference_tokens)))
    print(f"\n{args.tokens}-token prompt, {precision} against f32 in one call ({args.weight_format} weights, "
          f"input scale {args.input_scale:g})")
    print("| tokens per call | calls | max logit error | max hidden error | greedy tokens = one call's | = f32's |")
    print("|---:|---:|---:|---:|---:|---:|")
    for chunk, logit_error, hidden_error, same_as_one_call, same_as_f32 in rows:
        print(f"| {chunk} | {-(-args.tokens // chunk)} | {logit_error:.3f} | {hidden_error:.3f} | "
              f"{same_as_one_call} of {args.decode} | {same_as_f32} of {args.decode} |")


if __name__ == "__main__":
    main()
