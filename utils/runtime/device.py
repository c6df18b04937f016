"""Which OpenVINO device to run on, and the compile properties each device wants.

`GPU` (Intel integrated or Arc) gets a latency hint and a model cache folder, so the second start skips
kernel compilation; `CPU` gets a latency hint and, when asked, f32 precision (this CPU defaults to bf16,
which parity tests cannot use). `AUTO` lets OpenVINO choose. None of the GPU settings can be tested here.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["VIRTUAL_DEVICES", "F32_PROPERTIES", "resolve_device", "compile_properties"]

VIRTUAL_DEVICES = ("AUTO",)
# The reference precision: this CPU defaults to bf16, and for INT8-weight IRs it also quantizes activations
# on the fly unless the group size is 0 (then decode and verify IRs round alike: exact greedy parity).
F32_PROPERTIES = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}


def resolve_device(device: str | None, *, available: list[str] | None = None) -> str:
    """Returns `device`, or the best one present when None; raises ValueError for a device OpenVINO does not see.

    Args:
        device: `CPU`, `GPU`, `GPU.1`, `AUTO` or None.
        available: devices to choose from (default: what OpenVINO Runtime sees).
    """
    if available is None:
        import openvino as ov

        available = list(ov.Core().available_devices)
    if device is None:
        return "GPU" if any(name.startswith("GPU") for name in available) else "CPU"
    name = device.upper()
    if name in VIRTUAL_DEVICES or name in available or (name == "GPU" and any(a.startswith("GPU") for a in available)):
        return name
    raise ValueError(f"device '{device}' is not available here; OpenVINO sees {available} (and {list(VIRTUAL_DEVICES)})")


def compile_properties(device: str, *, f32: bool = False, cache_dir: Path | str | None = None) -> dict:
    """Compile properties for `core.compile_model(model, device, properties)`.

    Args:
        device: a resolved device name.
        f32: force f32 inference precision (exact parity with PyTorch; slower on GPU).
        cache_dir: where GPU/AUTO keep compiled kernels between runs.
    """
    properties = {"PERFORMANCE_HINT": "LATENCY"} | (F32_PROPERTIES if f32 else {})
    if cache_dir is not None and not device.startswith("CPU"):
        properties["CACHE_DIR"] = str(cache_dir)
    return properties
