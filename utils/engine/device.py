"""Which OpenVINO device to run on, at which precision, and the compile properties each device wants.

Every device gets a latency hint and, when asked, a model cache folder, so the second start imports the compiled
model instead of compiling it (a GPU skips kernel compilation; a CPU the graph's). `AUTO` lets OpenVINO choose.
None of the GPU settings can be tested here.

Precision is a choice (`PRECISIONS`): `"f32"` is exact (speculative output equals target-only output token
for token, and OpenVINO matches PyTorch); `"default"` is the device's own inference precision, bf16 on CPUs
with AMX/AVX-512-BF16 (like this one), f16 on GPUs, and much faster there. At reduced precision a verification
of several tokens can round differently from single decode steps, so a near-tie between the target's top
two candidates can flip (notebook 07 measures it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from utils.contract.core import openvino_core

if TYPE_CHECKING:
    import openvino as ov

__all__ = ["VIRTUAL_DEVICES", "PRECISIONS", "F32_PROPERTIES", "resolve_device", "check_precision",
           "compile_properties", "inference_precision"]

VIRTUAL_DEVICES = ("AUTO",)
PRECISIONS = ("f32", "default")
# The reference precision: this CPU defaults to bf16, and for INT8-weight IRs it also quantizes activations
# on the fly unless the group size is 0 (then single tokens and verification blocks round alike: exact greedy
# parity).
F32_PROPERTIES = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}


def resolve_device(device: str | None, *, available: list[str] | None = None) -> str:
    """Returns `device`, or the best one present when None; raises ValueError for a device OpenVINO does not see.

    Args:
        device: `CPU`, `GPU`, `GPU.1`, `AUTO` or None.
        available: devices to choose from (default: what OpenVINO Runtime sees).
    """
    if available is None:
        available = list(openvino_core().available_devices)
    if device is None:
        return "GPU" if any(name.startswith("GPU") for name in available) else "CPU"
    name = device.upper()
    if name in VIRTUAL_DEVICES or name in available or (name == "GPU" and any(a.startswith("GPU") for a in available)):
        return name
    raise ValueError(f"device '{device}' is not available here; OpenVINO sees {available} (and {list(VIRTUAL_DEVICES)})")


def check_precision(precision: str) -> str:
    """Returns `precision` if it is one of `PRECISIONS`; raises ValueError naming the choices otherwise."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not supported; choose one of {list(PRECISIONS)}")
    return precision


def compile_properties(device: str, *, precision: str = "default", cache_dir: Path | str | None = None,
                       threads: int | None = None) -> dict:
    """Compile properties for `core.compile_model(model, device, properties)`.

    Args:
        device: a resolved device name.
        precision: "f32" (exact) or "default" (the device's own precision: bf16 on this CPU, f16 on a GPU).
        cache_dir: OpenVINO's model cache: where compiled models are kept between runs, so that the next compile
            of the same IR with the same properties is an import (GPU kernels; on the CPU, the tiny target's 2.5 s
            compile becomes a 0.5 s import, which every archive worker pays at its start).
        threads: CPU inference threads (`INFERENCE_NUM_THREADS`), for processes that share the cores; None: all
            of them (OpenVINO's default). Only the CPU device takes it, and then leaves the threads unpinned: OpenVINO
            pins each process's threads to the first cores, so two processes of one thread shared one core.
    """
    properties = {"PERFORMANCE_HINT": "LATENCY"} | (F32_PROPERTIES if check_precision(precision) == "f32" else {})
    if cache_dir is not None:
        properties["CACHE_DIR"] = str(cache_dir)
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads={threads} must be at least 1")
        if device.startswith("CPU"):  # unpinned: every process would pin its threads to the same first cores
            properties |= {"INFERENCE_NUM_THREADS": threads, "ENABLE_CPU_PINNING": False}
    return properties


def inference_precision(compiled) -> str:
    """The inference precision a compiled model really runs at ("f32", "bf16", "f16"; "" when the device
    does not say)."""
    try:
        element_type = compiled.get_property("INFERENCE_PRECISION_HINT")
    except RuntimeError:
        return ""
    return element_type.to_string()
