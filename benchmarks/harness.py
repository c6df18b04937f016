"""What the real-size benchmarks share: their cached artefacts, their common options and their round order.

The artefacts are the random real-size target (`benchmarks.real_size_model`) and a random DSpark draft of the real
draft's size, exported once into a work folder (`--work`, `WORK_FOLDER` by default) and reused by every benchmark
that names the same folder. Rounds are interleaved (`interleaved_rounds`), so the shared CPU's drift hits every
configuration alike.
"""

from __future__ import annotations

import argparse
import gc
import resource
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from benchmarks.real_size_model import (EMBEDDINGS_FILE, VERIFY_LENGTH, export_random_text_model,
                                        real_size_draft_config, real_size_text_config, write_random_draft)
from utils.cli import int_at_least
from utils.contract import LanguageModelConfig
from utils.engine.timing import Clock

__all__ = ["BLOCK_SIZE", "PREFILL_CHUNK", "WORK_FOLDER", "CONTEXTS", "WARM_UP_CONTEXT", "add_work_option",
           "add_contexts_option", "add_rounds_option", "add_run_options", "prepare_target", "prepare_draft",
           "TableEmbeddings", "interleaved_rounds", "median_ms", "peak_resident_bytes"]

BLOCK_SIZE = VERIFY_LENGTH - 1
PREFILL_CHUNK = 128
WORK_FOLDER = Path("/tmp/dspark-engine-bench")  # where the real-size artefacts are cached between runs
CONTEXTS = (1024, 3072)  # context tokens: a short and a long document's prompt
WARM_UP_CONTEXT = 256  # tokens: a warm-up needs every call length, not the long context's prefill


def add_work_option(parser: argparse.ArgumentParser) -> None:
    """--work: the folder the real-size artefacts are cached in, shared by every benchmark that uses them."""
    parser.add_argument("--work", metavar="DIR", type=Path, default=WORK_FOLDER,
                        help="cache folder for the random real-size models and their IRs, shared by the benchmarks")


def add_contexts_option(parser: argparse.ArgumentParser) -> None:
    """--contexts: the context lengths every configuration runs after, `CONTEXTS` by default."""
    parser.add_argument("--contexts", metavar="N", type=int_at_least(1), nargs="+", default=list(CONTEXTS),
                        help="context tokens before the timed work")


def add_rounds_option(parser: argparse.ArgumentParser, *, rounds: int = 3) -> None:
    """--rounds: how often every configuration repeats, interleaved (`interleaved_rounds`)."""
    parser.add_argument("--rounds", metavar="N", type=int_at_least(1), default=rounds,
                        help="interleaved repetitions of every configuration")


def add_run_options(parser: argparse.ArgumentParser, *, new_tokens: int, rounds: int) -> None:
    """--new-tokens, --rounds and --seed: how long each run is, how often it repeats, which random contexts."""
    parser.add_argument("--new-tokens", metavar="N", type=int_at_least(1), default=new_tokens,
                        help="tokens generated per run")
    add_rounds_option(parser, rounds=rounds)
    parser.add_argument("--seed", metavar="N", type=int_at_least(0), default=0, help="seed of the random contexts")


def _exported_as_now(folder: Path) -> bool:
    """Whether `folder` holds a language model of this exporter's layout and of the benchmark's call lengths."""
    try:
        config = LanguageModelConfig.read(folder)
    except ValueError:  # an older exporter's layout
        return False
    return (config.prefill_chunk, config.verify_length) == (PREFILL_CHUNK, VERIFY_LENGTH)


def prepare_target(work: Path, weight_format: str, *, input_scale: float | None = None) -> Path:
    """The exported random target (and its embedding table as .npy) in `work`, built on first use.

    With `input_scale`, the target has trained-like margins (`benchmarks.real_size_model.sharpen_margins`) and a
    folder of its own.
    """
    from utils.files import atomic_directory

    folder = work / (f"target-{weight_format}" if input_scale is None else f"target-{weight_format}-x{input_scale:g}")
    if folder.is_dir() and _exported_as_now(folder):
        return folder
    if folder.is_dir():  # exported by an older exporter or with other lengths: export again
        shutil.rmtree(folder)
    with atomic_directory(folder) as staging:
        export_random_text_model(staging, weight_format=weight_format, prefill_chunk=PREFILL_CHUNK,
                                 input_scale=input_scale)
    return folder


def prepare_draft(work: Path, weight_format: str) -> Path:
    """The exported random real-size draft in `work`, built (checkpoint, then IR) on first use."""
    from utils.export.draft import export_draft
    from utils.files import atomic_directory
    from utils.models import current_draft_export

    source, folder = work / "draft-checkpoint", work / f"draft-{weight_format}"
    if not source.is_dir():
        text_config = real_size_text_config()
        config = real_size_draft_config(text_config, block_size=BLOCK_SIZE,
                                        mask_token_id=text_config.vocab_size - 1)
        with atomic_directory(source) as staging:
            parameters = write_random_draft(staging, config)
        print(f"random DSpark draft: {parameters / 1e6:.1f}M parameters", flush=True)
    if not current_draft_export(folder):  # absent, or exported by older code
        start = time.perf_counter()
        export_draft(source, folder, weight_format=weight_format, overwrite=True)
        print(f"  draft exported ({weight_format}) in {time.perf_counter() - start:.0f} s", flush=True)
        gc.collect()
    return folder


class TableEmbeddings:
    """Rows of the target's embedding table, held in numpy: stands in for the text-embedding IR."""

    def __init__(self, table: np.ndarray):
        self.table = table
        self.clock = Clock()

    @classmethod
    def of(cls, target: Path) -> TableEmbeddings:
        """The table an exported random target saved beside its IR, memory-mapped: rows are read on use."""
        return cls(np.load(target / EMBEDDINGS_FILE, mmap_mode="r"))

    def __call__(self, input_ids: np.ndarray) -> np.ndarray:
        """[batch, S] int -> [batch, S, H] float32."""
        with self.clock.measure():
            return self.table[np.asarray(input_ids)]


def interleaved_rounds(configurations: list, rounds: int) -> Iterator[tuple[int, object]]:
    """Every configuration `rounds` times, as (round index, configuration): each round starts one configuration
    later, so the shared CPU's drift hits all of them alike."""
    for round_index in range(rounds):
        shift = round_index % len(configurations)
        for configuration in configurations[shift:] + configurations[:shift]:
            yield round_index, configuration


def median_ms(call: Callable[[], object], *, repeats: int, warm_up: int = 0) -> float:
    """The median of `repeats` timed calls of `call` (each on an `engine.timing.Clock`), after `warm_up` untimed
    ones, in milliseconds: a median, so that a call the shared CPU delayed does not move it."""
    for _ in range(warm_up):
        call()
    samples = []
    for _ in range(repeats):
        clock = Clock()
        with clock.measure():
            call()
        samples.append(clock.seconds)
    return 1000 * statistics.median(samples)


def peak_resident_bytes() -> int:
    """This process's peak resident memory: Linux's VmHWM, which starts anew in a fresh process (`ru_maxrss` keeps
    the parent's peak across exec), else `ru_maxrss`. A benchmark reads it at the end of a fresh process that did
    only the work it measures."""
    status = Path("/proc/self/status")
    if status.is_file():
        peak = next(line for line in status.read_text().splitlines() if line.startswith("VmHWM:"))
        return 1024 * int(peak.split()[1])  # kB
    return 1024 * resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, the only other reader here
