"""Wall time, summed per purpose: a `Clock` per OpenVINO model, a `StageTimer` per generation.

Each model wrapper measures its inference calls with its own `Clock`, so a generation can report how much of
its time OpenVINO took and how much the host added around it. A `StageTimer` is one clock per stage of a
generation (`STAGES`), and the time since it started.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

__all__ = ["STAGES", "Clock", "StageTimer"]

# Where a generation's time goes; "other" is whatever the stages do not cover (Python glue, detokenizing).
STAGES = ("vision", "prefill", "draft", "markov_head", "verification")


class Clock:
    """Sums the seconds of the calls measured with `with clock.measure(): ...`."""

    def __init__(self):
        self.seconds = 0.0

    @contextmanager
    def measure(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start


class StageTimer:
    """Wall time per stage of one generation (`with timer.stage("draft"): ...`), and the time since it started."""

    def __init__(self):
        self.clocks = {name: Clock() for name in STAGES}
        self.started = time.perf_counter()

    def stage(self, name: str):
        """A context that adds its duration to stage `name` (one of `STAGES`)."""
        return self.clocks[name].measure()

    @property
    def seconds(self) -> dict[str, float]:
        """Seconds per stage so far."""
        return {name: clock.seconds for name, clock in self.clocks.items()}

    def elapsed(self) -> float:
        """Seconds since the timer started."""
        return time.perf_counter() - self.started
