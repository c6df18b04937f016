"""How fast OpenVINO's CPU plugin reads int8 weights in a single-token matmul: the kernel's part of the roofline gap.

A decode step of the target is mostly matmuls of one token by int8 weights (`benchmarks.roofline`). This
measures those kernels alone, outside the model: a graph of `count` independent FullyConnected layers, each
[1, 1, K] x [N, K]^T with its own weights stored as the export stores the target's (u8 with a zero point and an
f16 scale per row: NNCF's INT8_ASYM), compiled with each precision the suite compiles with, called `repeats`
times (median). GB/s is weight bytes per call over its time; set beside the machine's read bandwidth it says how
much of the gap between decoding and the roofline the kernels alone already take. Shapes: the target's output
embedding (248,320 x 1,024, a third of its weights) and its linear-attention input projection (6,144 x 1,024,
40 of them: about the size of the many smaller matmuls of a layer).

    python -m benchmarks.fc_kernels [--repeats 12] [--json FILE]

Precisions: "f32" and "default" as `utils.engine.device.compile_properties` gives them (f32 exact, with the
plugin's dynamic quantization of activations off; the device's own: bf16 on a CPU with AMX or AVX-512 bf16),
and "f32, dynamic quantization" (f32 with activations quantized to int8 in groups of 32 inside the matmul: the
plugin's default on CPUs without bf16, where "default" means this).
"""

from __future__ import annotations


import numpy as np

from benchmarks.harness import median_ms
from utils.cli import add_json_option, command_parser, int_at_least, write_json
from utils.notebook.display import markdown_table
from utils.engine.device import compile_properties

__all__ = ["SHAPES", "PRECISIONS", "int8_matmuls", "measure_kernels", "main"]

SHAPES = {"output embedding": (248_320, 1024, 1), "linear-attention input projection": (6144, 1024, 40)}
DYNAMIC_QUANTIZATION = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "32"}
PRECISIONS = {"f32": compile_properties("CPU", precision="f32"),
              "default": compile_properties("CPU", precision="default"),
              "f32, dynamic quantization": compile_properties("CPU", precision="default") | DYNAMIC_QUANTIZATION}


def int8_matmuls(rows: int, columns: int, count: int, *, seed: int = 0):
    """(ov.Model x [1, S, columns] -> [1, S, count * rows], the same matmuls in numpy f32 for checking): `count`
    matmuls by [rows, columns] u8 weights with a per-row u8 zero point and f16 scale, outputs concatenated."""
    import openvino as ov
    import openvino.opset13 as opset

    rng = np.random.default_rng(seed)
    inputs = opset.parameter([1, -1, columns], np.float32, name="x")
    outputs, dequantized = [], []
    for _ in range(count):
        weights = rng.integers(0, 256, (rows, columns), dtype=np.uint8)
        zero_point = rng.integers(120, 136, (rows, 1), dtype=np.uint8)
        scale = (rng.random((rows, 1)) * 0.01 + 0.001).astype(np.float16)
        centred = opset.subtract(opset.convert(opset.constant(weights), "f16"),
                                 opset.convert(opset.constant(zero_point), "f16"))
        matrix = opset.convert(opset.multiply(centred, opset.constant(scale)), "f32")
        outputs.append(opset.matmul(inputs, matrix, False, True))
        dequantized.append((weights.astype(np.float32) - zero_point) * scale.astype(np.float32))
    model = ov.Model([opset.concat(outputs, 2) if count > 1 else outputs[0]], [inputs])
    return model, lambda x: np.concatenate([x @ matrix.T for matrix in dequantized], axis=-1)


def measure_kernels(shapes: dict = SHAPES, precisions: dict = PRECISIONS, *, repeats: int = 12) -> list[dict]:
    """One row per shape and precision: ms per single-token call (median of `repeats`, after 2 warm-up calls) and
    weight GB/s."""
    import openvino as ov

    core, rows = ov.Core(), []
    for name, (n_rows, columns, count) in shapes.items():
        model, _ = int8_matmuls(n_rows, columns, count)
        token = np.random.default_rng(1).standard_normal((1, 1, columns)).astype(np.float32)
        for precision, properties in precisions.items():
            request = core.compile_model(model, "CPU", properties).create_infer_request()
            milliseconds = median_ms(lambda: request.infer({"x": token}), repeats=repeats, warm_up=2)
            weight_bytes = n_rows * columns * count
            rows.append({"weights": name, "shape": [n_rows, columns, count], "precision": precision,
                         "ms": milliseconds, "weight_gb_s": weight_bytes / milliseconds / 1e6})
            del request
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = command_parser("benchmarks.fc_kernels", __doc__.split("\n\n")[0])
    parser.add_argument("--repeats", metavar="N", type=int_at_least(1), default=12, help="timed calls per row (median)")
    add_json_option(parser, what="the rows")
    args = parser.parse_args(argv)
    rows = measure_kernels(repeats=args.repeats)
    print(markdown_table([{"weights": row["weights"], "N x K x count": " x ".join(map(str, row["shape"])),
                           "precision": row["precision"], "ms per call": f"{row['ms']:.2f}",
                           "weights GB/s": f"{row['weight_gb_s']:.1f}"} for row in rows],
                         right=("ms per call", "weights GB/s")))
    if args.json:
        write_json(args.json, {"rows": rows})


if __name__ == "__main__":
    main()
