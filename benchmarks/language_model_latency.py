"""Latency and memory of the language-model IR at MiniCPM-OCR's size: one token, a verification block, a prompt chunk.

Builds a randomly initialised Qwen3.5 text model shaped like MiniCPM-OCR 1.0's (24 layers, every 4th full
attention, hidden 1024, MLP 3584, 8 query / 2 KV heads of 256, 16 linear key/value heads of 128, vocabulary
248,320, tied embeddings: ~752M parameters, printed at start), exports it with `export_language_model` (one IR
of dynamic length) per weight format, and reports:

- the median milliseconds of one call of 1 token (decode), `VERIFY_LENGTH` tokens (a verification, logits of
  every position) and `PREFILL_CHUNK` tokens (a prompt chunk, logits of the last one), with random state at
  each context length, and the host-side rollback (`rebuild_recurrent_state` over all linear-attention
  layers, half a block kept);
- the peak resident memory of a fresh process that opens a `LanguageModelSession` and makes one call of each
  kind, next to the size of the IR's weights file: the session compiles one model, so it holds the weights
  once (OpenVINO's CPU plugin keeps a private copy per compiled model, on top of the mapped file).

Run only when invoked (a real-size job: wrap it in `flock /tmp/realsize.lock` where other jobs share the machine):

    python -m benchmarks.language_model_latency [--contexts 1024 3072] [--formats fp32 int8] [--repeats 10]
                                                [--precision f32|default]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.harness import PREFILL_CHUNK, add_contexts_option, median_ms, peak_resident_bytes
from benchmarks.real_size_model import HIDDEN_LAYER_IDS, VERIFY_LENGTH, build_random_text_model
from utils.cli import command_parser, existing_dir, int_at_least
from utils.contract import (ATTENTION_MASK, INPUTS_EMBEDS, LANGUAGE_MODEL_NAME, NUM_LOGITS, POSITION_IDS,
                            past_recurrent_state, rollback_delta, rollback_key, rollback_log_decay)
from utils.engine.device import PRECISIONS
from utils.notebook.display import markdown_table

__all__ = ["main"]

CALLS = {"decode": (1, 1), "verify": (VERIFY_LENGTH, VERIFY_LENGTH), "prefill": (PREFILL_CHUNK, 1)}  # (S, logits)


def _export(folder: Path, formats: list[str]) -> dict[str, Path]:
    """Exports the random model once per weight format; returns {format: folder}."""
    from utils.export.language_model import export_language_model

    model = build_random_text_model(seed=0)
    print(f"random Qwen3.5 text model: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters",
          flush=True)
    folders = {}
    for weight_format in formats:
        folders[weight_format] = folder / weight_format
        folders[weight_format].mkdir()
        report = export_language_model(model, folders[weight_format], hidden_layer_ids=HIDDEN_LAYER_IDS,
                                       verify_length=VERIFY_LENGTH, prefill_chunk=PREFILL_CHUNK,
                                       weight_format=weight_format)
        print(f"  exported {weight_format} in {report['export_seconds']:.0f} s", flush=True)
    del model
    gc.collect()
    return folders


def _random_inputs(compiled, *, tokens: int, logits: int, context: int, rng: np.random.Generator) -> dict:
    """Inputs of one call of `tokens` tokens after `context` tokens of random past state."""
    inputs = {}
    for port in compiled.inputs:
        name = port.get_any_name()
        shape = [None if dim.is_dynamic else dim.get_length() for dim in port.get_partial_shape()]
        if name == INPUTS_EMBEDS:
            inputs[name] = (0.1 * rng.standard_normal((1, tokens, shape[2]))).astype(np.float32)
        elif name == POSITION_IDS:
            inputs[name] = (np.arange(tokens, dtype=np.int64) + context)[None]
        elif name == ATTENTION_MASK:
            inputs[name] = np.ones((1, tokens), np.int64)
        elif name == NUM_LOGITS:
            inputs[name] = np.array(logits, np.int64)
        else:
            inputs[name] = (0.1 * rng.standard_normal([context if size is None else size for size in shape])
                            ).astype(np.float32)
    return inputs


def _time_calls(folder: Path, properties: dict, *, contexts: list[int], repeats: int) -> dict:
    """{(call, context): median ms} for every call kind, plus "rollback_host_ms"."""
    import openvino as ov

    from utils.engine.language_model import rebuild_recurrent_state

    compiled = ov.Core().compile_model(folder / LANGUAGE_MODEL_NAME, "CPU", properties)
    request = compiled.create_infer_request()
    rng = np.random.default_rng(0)
    timings = {}
    for context in contexts:
        for call, (tokens, logits) in CALLS.items():
            inputs = _random_inputs(compiled, tokens=tokens, logits=logits, context=context, rng=rng)
            request.infer(inputs, share_inputs=True)
            timings[call, context] = median_ms(lambda: request.infer(inputs, share_inputs=True, share_outputs=True),
                                               repeats=repeats)
    outputs = {name: request.get_tensor(name).data for port in compiled.outputs for name in port.get_names()}
    layers = [layer for layer in range(len(outputs)) if rollback_key(layer) in outputs]

    def rollback():
        for layer in layers:
            rebuild_recurrent_state(inputs[past_recurrent_state(layer)], outputs[rollback_key(layer)],
                                    outputs[rollback_delta(layer)], outputs[rollback_log_decay(layer)],
                                    PREFILL_CHUNK // 2)

    timings["rollback_host_ms"] = median_ms(rollback, repeats=repeats)
    return timings


def _session_peak_memory(folder: Path, properties: dict) -> dict:
    """In this process: peak resident GB after a session's compile and one call of each kind."""
    from utils.engine.language_model import LanguageModelSession

    session = LanguageModelSession(folder, properties=properties)
    rng = np.random.default_rng(0)
    embeds = (0.1 * rng.standard_normal((PREFILL_CHUNK + VERIFY_LENGTH, session.config.hidden_size))
              ).astype(np.float32)
    session.prefill(embeds[:PREFILL_CHUNK])
    session.verify(embeds[PREFILL_CHUNK:])
    session.accept(VERIFY_LENGTH // 2)
    session.decode_one(embeds[-1])
    return {"peak_rss_gb": peak_resident_bytes() / 2 ** 30}


def _measure_memory_in_a_fresh_process(folder: Path, precision: str) -> dict:
    command = [sys.executable, "-m", "benchmarks.language_model_latency", "--memory-of", str(folder),
               "--precision", precision]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    """Exports, times, measures memory and prints a markdown table."""
    from utils.engine.device import compile_properties

    parser = command_parser("benchmarks.language_model_latency", __doc__)
    add_contexts_option(parser)
    parser.add_argument("--formats", nargs="+", default=["fp32", "int8"], choices=["fp32", "fp16", "int8", "int4"],
                        help="weight formats of the language-model IR")
    parser.add_argument("--repeats", metavar="N", type=int_at_least(1), default=10,
                        help="timed runs of each call (the median counts)")
    parser.add_argument("--precision", choices=PRECISIONS, default="f32",
                        help="f32: exact (the parity setting); default: the CPU's own (bf16 here)")
    # the fresh process that measures the memory figure
    parser.add_argument("--memory-of", metavar="DIR", type=existing_dir, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    properties = compile_properties("CPU", precision=args.precision)
    if args.memory_of is not None:
        print(json.dumps(_session_peak_memory(args.memory_of, properties)), flush=True)
        return

    rows = []
    with tempfile.TemporaryDirectory(prefix="lm-latency-") as folder:
        for weight_format, path in _export(Path(folder), args.formats).items():
            memory = _measure_memory_in_a_fresh_process(path, args.precision)
            timings = _time_calls(path, properties, contexts=args.contexts, repeats=args.repeats)
            weights_gb = (path / LANGUAGE_MODEL_NAME).with_suffix(".bin").stat().st_size / 2 ** 30
            rows.append({"weights": weight_format, "weights file (GB)": f"{weights_gb:.2f}",
                         "session peak RSS (GB)": f"{memory['peak_rss_gb']:.2f}"}
                        | {f"{call} ({CALLS[call][0]}) @ {context} (ms)": f"{timings[call, context]:.1f}"
                           for context in args.contexts for call in CALLS}
                        | {"host rollback (ms)": f"{timings['rollback_host_ms']:.1f}"})
            print(f"  measured {weight_format}", flush=True)
            gc.collect()
    print(f"\nprecision {args.precision}\n\n" + markdown_table(rows, right=set(rows[0]) - {"weights"}))


if __name__ == "__main__":
    main()
