"""`benchmarks.harness`: the round order every timed benchmark shares, its median timer and its peak-memory figure."""

from __future__ import annotations

import subprocess
import sys

from benchmarks.harness import interleaved_rounds, median_ms


def test_every_configuration_runs_every_round_each_round_starting_one_later():
    runs = list(interleaved_rounds(["a", "b", "c"], 4))
    assert runs == [(0, "a"), (0, "b"), (0, "c"), (1, "b"), (1, "c"), (1, "a"),
                    (2, "c"), (2, "a"), (2, "b"), (3, "a"), (3, "b"), (3, "c")]


def test_the_median_timer_ignores_one_slow_call_and_runs_the_warm_up_untimed():
    import time

    calls = []

    def call():
        calls.append(len(calls))
        time.sleep(0.2 if len(calls) == 3 else 0.0)  # the first timed call, after two warm-ups, is the slow one

    assert median_ms(call, repeats=5, warm_up=2) < 100
    assert len(calls) == 7


def test_peak_memory_is_the_fresh_process_own_not_its_parent():
    """A parent that held 400 MB starts a child that holds little: the child's figure must not carry the parent's
    peak (`ru_maxrss` would, across exec)."""
    child = ("from benchmarks.harness import peak_resident_bytes; print(peak_resident_bytes())")
    parent = ("import subprocess, sys; block = bytearray(400 * 2 ** 20); block[::4096] = b'x' * len(block[::4096]); "
              f"print(subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, text=True, "
              "check=True).stdout)")
    figure = int(subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, check=True).stdout)
    assert figure < 300 * 2 ** 20
