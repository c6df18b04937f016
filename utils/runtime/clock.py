"""Time spent inside OpenVINO inference calls, so the pipeline can report what the host adds around them."""

from __future__ import annotations

import time
from contextlib import contextmanager

__all__ = ["InferenceClock"]


class InferenceClock:
    """Sums the seconds of the inference calls measured with `with clock.measure(): ...`."""

    def __init__(self):
        self.seconds = 0.0

    @contextmanager
    def measure(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start
