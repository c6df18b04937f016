"""A prompt in several calls at the default precision, at real size: as close to f32 as one call?

    python -m benchmarks.chunked_prefill [--tokens 512] [--longest-call N] [--calls 256 128 64] [--decode 128]

Builds the random real-size text model with a trained model's margins (`benchmarks.real_size_model`:
`sharpen_margins`), exports its language model with calls of up to `--longest-call` tokens (default: the whole
prompt), and prefills a prompt of `--tokens` random token ids at f32 in calls of that length, the reference; then
at the device's default precision in calls of that length and of each `--calls` size. It prints the largest error
of the prompt's last logits and of every position's hidden states against the reference, and, after each prefill,
greedy decoding of `--decode` tokens at the default precision: how many tokens equal the first row's decoding's
before the first difference, and how many of a speculative decoding's equal that prefill's own target-only
decoding (verification blocks of 16 with a stand-in draft that knows the answer and is right for 5.47 tokens per
step, as upstream's draft). Random ids stand in for a
page: the rounding is measured, not the text. A longest call of 512 tokens takes about 15 GB and 8 minutes to
export on two cores; a page's whole prompt at 4x with 9 slices (1,881 tokens) in one call did not fit in 24 GB
(the conversion's memory grows with the gated delta rule's unrolled chunk slots, `--chunk-size`), so measure it
with `--tokens 1881 --longest-call 512`.
"""

from __future__ import annotations

import gc
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.cpu_speedup import UPSTREAM_TAU
from benchmarks.harness import BLOCK_SIZE, TableEmbeddings
from benchmarks.real_size_model import export_random_text_model
from benchmarks.stand_ins import ForcedAcceptanceProposer, tau_schedule
from utils.cli import command_parser, float_between, int_at_least
from utils.evaluation.compare import first_difference
from utils.notebook.display import markdown_table

__all__ = ["main"]


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
    first = first_difference(tokens, reference)
    return len(reference) if first is None else first


def _speculative(session, embed, prompt: np.ndarray, target_only: list[int], *, chunk: int) -> list[int]:
    """Greedy speculative decoding after prefilling `prompt` in calls of `chunk`: a stand-in draft proposes
    `target_only` (that prefill's own greedy decoding), right for 5.47 tokens per step, wrong after, in blocks as
    long as the session verifies."""
    from utils.engine.decoder import SpeculativeDecoder

    session.prefill_chunk = chunk
    padded = target_only + [0] * session.verify_length  # a last block may reach past the budget
    proposer = ForcedAcceptanceProposer(None, padded, schedule=tau_schedule(UPSTREAM_TAU),
                                        vocab_size=len(embed.table))
    decoder = SpeculativeDecoder(session, embed, stop_token_ids=(), proposer=proposer,
                                 block_size=session.verify_length - 1)
    return decoder.generate(embed.table[prompt], max_new_tokens=len(target_only),
                            confidence_threshold=0.0).tokens


def main(argv: list[str] | None = None) -> None:
    from utils.contract.core import openvino_core
    from utils.engine.device import compile_properties
    from utils.engine.language_model import LanguageModelSession
    from utils.export.gated_delta import DEFAULT_CHUNK_SIZE

    parser = command_parser("benchmarks.chunked_prefill", __doc__.split("\n\n", 2)[2])
    parser.add_argument("--tokens", metavar="N", type=int_at_least(2), default=512, help="prompt tokens")
    parser.add_argument("--longest-call", metavar="N", type=int_at_least(1),
                        help="the IR's longest call, the reference's and the first row's (default: --tokens)")
    parser.add_argument("--calls", metavar="N", type=int_at_least(1), nargs="+", default=[256, 128, 64],
                        help="tokens per prefill call, each measured")
    parser.add_argument("--chunk-size", metavar="N", type=int_at_least(1), default=DEFAULT_CHUNK_SIZE,
                        help="tokens per chunk of the gated delta rule in the graph (64 for a 1,881-token call)")
    parser.add_argument("--input-scale", metavar="X", type=float_between(1.0, 1000.0), default=16.0,
                        help="sharpen_margins' input scale (16: the benchmarks' trained-like margins)")
    parser.add_argument("--decode", metavar="N", type=int_at_least(1), default=128, help="greedy tokens after")
    parser.add_argument("--weight-format", choices=("fp32", "int8"), default="fp32", help="the IR's weights")
    args = parser.parse_args(argv)
    longest = min(args.longest_call or args.tokens, args.tokens)
    prompt = np.random.default_rng(0).integers(0, 248_000, size=args.tokens)
    with tempfile.TemporaryDirectory() as folder:
        export_random_text_model(Path(folder), weight_format=args.weight_format, prefill_chunk=longest,
                                 input_scale=args.input_scale, chunk_size=args.chunk_size)
        embed = TableEmbeddings.of(Path(folder))
        table = embed.table
        length = args.tokens + args.decode + 2 * BLOCK_SIZE
        exact = LanguageModelSession(folder, properties=compile_properties("CPU", precision="f32"), max_length=length)
        reference_logits, reference_hidden, reference_tokens = _read(exact, table, prompt, chunk=longest,
                                                                     decode=args.decode)
        del exact
        gc.collect()
        default = LanguageModelSession(folder, properties=compile_properties("CPU"), max_length=length)
        precision = openvino_core().get_property("CPU", "INFERENCE_PRECISION_HINT").to_string()
        rows, first_row_tokens = [], None
        for chunk in (longest, *args.calls):
            logits, hidden, tokens = _read(default, table, prompt, chunk=chunk, decode=args.decode)
            first_row_tokens = first_row_tokens or tokens
            speculative = _speculative(default, embed, prompt, tokens, chunk=chunk)
            rows.append((chunk, np.abs(logits - reference_logits).max(), np.abs(hidden - reference_hidden).max(),
                         _agreeing(tokens, first_row_tokens), _agreeing(tokens, reference_tokens),
                         _agreeing(speculative, tokens)))
    print(f"\n{args.tokens}-token prompt, {precision} against f32 in calls of {longest} "
          f"({args.weight_format} weights, input scale {args.input_scale:g}, gated delta chunks of {args.chunk_size})")
    table = [{"tokens per call": chunk, "calls": -(-args.tokens // chunk), "max logit error": f"{logit_error:.3f}",
              "max hidden error": f"{hidden_error:.3f}",
              f"greedy tokens = calls of {longest}'s": f"{same_as_first_row} of {args.decode}",
              "= f32's": f"{same_as_f32} of {args.decode}",
              "speculative = target-only": f"{speculative_same} of {args.decode}"}
             for chunk, logit_error, hidden_error, same_as_first_row, same_as_f32, speculative_same in rows]
    print(markdown_table(table, right=set(table[0])))


if __name__ == "__main__":
    main()
