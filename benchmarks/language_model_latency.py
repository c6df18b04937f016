"""Latency of the language-model IRs at MiniCPM-OCR's size: decode (1 token) and verification (K+1 tokens).

Builds a randomly initialised Qwen3.5 text model shaped like MiniCPM-OCR 1.0's (24 layers, every 4th full
attention, hidden 1024, MLP 3584, 8 query / 2 KV heads of 256, 16 linear key/value heads of 128, vocabulary
248,320, tied embeddings: ~752M parameters, printed at start), converts it with the same code as
`utils.export.language_model`, and times each IR with random state at 1k and 3k tokens of context, for
fp32 and int8 weights, with and without the verify IR's rollback outputs. Also times the host-side
rollback (`rebuild_recurrent_state` over all linear-attention layers). Run only when invoked:

    python -m benchmarks.language_model_latency [--contexts 1024 3072] [--formats fp32 int8] [--repeats 10]

Peak memory is about one fp32 model in torch plus one compiled IR (IRs go to a temporary folder first).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.real_size_model import HIDDEN_LAYER_IDS, VERIFY_LENGTH, build_random_text_model
from utils.contract import (ATTENTION_MASK, INPUTS_EMBEDS, POSITION_IDS, LanguageModelVariant, past_recurrent_state,
                            rollback_delta, rollback_key, rollback_log_decay)

__all__ = ["main"]


def _export_irs(folder: Path, formats: list[str]) -> dict:
    """Writes decode, verify and verify-without-rollback IRs per weight format; returns {(format, name): path}."""
    import openvino as ov

    from utils.export.language_model import compress_weights, convert_language_model

    model = build_random_text_model(seed=0)
    print(f"random Qwen3.5 text model: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters",
          flush=True)
    variants = [LanguageModelVariant("decode", 1, all_logits=True, rollback=False),
                LanguageModelVariant("verify", VERIFY_LENGTH, all_logits=True, rollback=True),
                LanguageModelVariant("verify-no-rollback", VERIFY_LENGTH, all_logits=True, rollback=False)]
    paths = {}
    for variant in variants:
        start = time.perf_counter()
        converted = convert_language_model(model, variant=variant, hidden_layer_ids=HIDDEN_LAYER_IDS)
        print(f"  converted {variant.name} in {time.perf_counter() - start:.1f} s", flush=True)
        for weight_format in sorted(formats, key=lambda name: name == "int8"):  # NNCF edits in place
            path = folder / weight_format / f"{variant.name}.xml"
            path.parent.mkdir(exist_ok=True)
            ov.save_model(compress_weights(converted, weight_format), path, compress_to_fp16=False)
            paths[(weight_format, variant.name)] = path
        del converted
        gc.collect()
    return paths


def _random_inputs(model, *, context: int, rng: np.random.Generator) -> dict:
    """Inputs of one IR call with `context` tokens of random past state."""
    length = model.input(INPUTS_EMBEDS).get_partial_shape()[1].get_length()
    inputs = {}
    for port in model.inputs:
        name = port.get_any_name()
        shape = [context if dim.is_dynamic else dim.get_length() for dim in port.get_partial_shape()]
        if name == POSITION_IDS:
            inputs[name] = (np.arange(length, dtype=np.int64) + context)[None]
        elif name == ATTENTION_MASK:
            inputs[name] = np.ones(shape, np.int64)
        else:
            inputs[name] = (0.1 * rng.standard_normal(shape)).astype(np.float32)
    return inputs


def _time_ir(core, path: Path, *, contexts: list[int], repeats: int) -> dict:
    """Median milliseconds per inference at each context, and the host rollback time for the verify IR."""
    from utils.engine.language_model import rebuild_recurrent_state

    model = core.read_model(path)
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    rng = np.random.default_rng(0)
    timings = {}
    for context in contexts:
        inputs = _random_inputs(model, context=context, rng=rng)
        request.infer(inputs, share_inputs=True)
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            request.infer(inputs, share_inputs=True, share_outputs=True)
            samples.append(time.perf_counter() - start)
        timings[context] = 1000 * statistics.median(samples)
    outputs = {name: request.get_tensor(name).data for port in compiled.outputs for name in port.get_names()}
    layers = [layer for layer in range(len(outputs)) if rollback_key(layer) in outputs]
    if layers:
        start = time.perf_counter()
        for _ in range(repeats):
            for layer in layers:
                rebuild_recurrent_state(inputs[past_recurrent_state(layer)], outputs[rollback_key(layer)],
                                        outputs[rollback_delta(layer)], outputs[rollback_log_decay(layer)],
                                        VERIFY_LENGTH // 2)
        timings["rollback_host_ms"] = 1000 * (time.perf_counter() - start) / repeats
    del request, compiled
    gc.collect()
    return timings


def main(argv: list[str] | None = None) -> None:
    """Exports, times and prints a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[1024, 3072])
    parser.add_argument("--formats", nargs="+", default=["fp32", "int8"], choices=["fp32", "fp16", "int8"])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)

    import openvino as ov

    core = ov.Core()
    with tempfile.TemporaryDirectory(prefix="lm-latency-") as folder:
        paths = _export_irs(Path(folder), args.formats)
        gc.collect()
        header = " | ".join(f"{context} ctx (ms)" for context in args.contexts)
        print(f"\n| weights | IR | tokens | {header} | host rollback (ms) |")
        print("|---|---|---|" + "---|" * len(args.contexts) + "---|")
        for (weight_format, name), path in paths.items():
            timings = _time_ir(core, path, contexts=args.contexts, repeats=args.repeats)
            tokens = 1 if name == "decode" else VERIFY_LENGTH
            cells = " | ".join(f"{timings[context]:.1f}" for context in args.contexts)
            rollback = f"{timings['rollback_host_ms']:.1f}" if "rollback_host_ms" in timings else "-"
            print(f"| {weight_format} | {name} | {tokens} | {cells} | {rollback} |", flush=True)


if __name__ == "__main__":
    main()
