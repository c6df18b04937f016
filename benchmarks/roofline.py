"""The memory roofline of one decode step: bytes a token reads over the machine's measured memory bandwidth.

A single-token decode step of the target reads all its weights once, the K/V cache of its full-attention layers
up to the context, and the linear-attention layers' states (which it also writes back). With B bytes per token
and a read bandwidth of W bytes/s, no implementation can decode faster than B / W seconds per token; the ratio
of the measured time to that bound says how close the engine runs to the hardware.

The bandwidth is measured here, in numpy: `threads` threads (numpy releases the GIL in reductions and copies)
each sum (read) or copy (read + write) their share of a buffer much larger than the caches; the best of
`repeats` passes counts (the shared CPU's other work only ever slows a pass down). A decode step reads, so the
bound uses the read rate (`bandwidth`); the copy rate counts the bytes read and written, which on these 2 cores
add up to more than either stream alone reaches (45 against 30-35 GB/s), and is reported beside it. An earlier
version took the faster of the two and so set the bound a third too low. Summing float64 is not what limits the
read rate here: taking the max of uint8 bytes, counting nonzero bytes or summing float32 read 31-35 GB/s too.
A ratio under 1 would mean the measurement undershot, not that physics was beaten.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

__all__ = ["memory_bandwidth", "weight_bytes", "bytes_per_token", "roofline_row"]


def memory_bandwidth(*, megabytes: int = 512, repeats: int = 5, threads: int | None = None) -> dict[str, float]:
    """{"read": bytes/s of summing, "copy": bytes/s moved (read + write) by copying, "bandwidth": the read rate,
    what a decode step's bound divides by} over a `megabytes` buffer of float64."""
    if megabytes < 1 or repeats < 1:
        raise ValueError(f"megabytes={megabytes} and repeats={repeats} must be >= 1")
    threads = threads or os.cpu_count() or 1
    source = np.ones(megabytes * 2**20 // 8, np.float64)
    target = np.empty_like(source)
    parts = np.array_split(np.arange(len(source)), threads)
    bounds = [(part[0], part[-1] + 1) for part in parts if len(part)]

    def best_seconds(work) -> float:
        fastest = float("inf")
        with ThreadPoolExecutor(len(bounds)) as pool:
            for _ in range(repeats):
                start = time.perf_counter()
                list(pool.map(work, bounds))
                fastest = min(fastest, time.perf_counter() - start)
        return fastest

    read = best_seconds(lambda b: source[b[0]:b[1]].sum())
    copy = best_seconds(lambda b: np.copyto(target[b[0]:b[1]], source[b[0]:b[1]]))
    rates = {"read": source.nbytes / read, "copy": 2 * source.nbytes / copy}
    return rates | {"bandwidth": rates["read"]}


def weight_bytes(ir_xml: Path | str) -> int:
    """Bytes of an OpenVINO IR's weights: the size of the .bin file beside its .xml."""
    return Path(ir_xml).with_suffix(".bin").stat().st_size


def bytes_per_token(*, weights: int, state: dict[str, int]) -> dict[str, int]:
    """Bytes one decode step reads: weights, each state part (`LanguageModelSession.state_bytes`), and the total."""
    parts = {"weights": weights} | state
    return parts | {"total": sum(parts.values())}


def roofline_row(*, context: int, per_token: dict[str, int], bandwidth: float, decode_ms: float) -> dict:
    """One context's line: bytes per token, the bound (ms) at `bandwidth` bytes/s, measured decode ms, their ratio."""
    if bandwidth <= 0:
        raise ValueError(f"bandwidth={bandwidth} must be positive")
    bound_ms = 1000 * per_token["total"] / bandwidth
    return {"context": context, **{f"{name}_bytes": value for name, value in per_token.items()},
            "bandwidth_gb_s": bandwidth / 1e9, "bound_ms": bound_ms, "decode_ms": decode_ms,
            "over_bound": decode_ms / bound_ms}
