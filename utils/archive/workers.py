"""Workers on this machine: this process, or N processes that each compile one pipeline and share the cores.

Every kind of worker has one method, `read(tasks)`, which yields `(task, record)` as pages finish, in whatever
order they finish. A worker that dies takes only its unfinished pages with it: the caller reads again what has
no record (`utils.archive.run`). Processes are started with `spawn` (nothing of the parent's OpenVINO or torch
state is inherited), end themselves if the parent is killed, and leave Ctrl-C to the parent, which stops them.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from utils.archive.pages import PageTask
from utils.archive.reader import PageReader, ReadSettings

__all__ = ["WorkersLost", "WorkerStartFailed", "available_cores", "threads_per_worker", "oversubscription",
           "LocalWorker", "ProcessWorkers"]


class WorkersLost(RuntimeError):
    """Every worker died before the pages were read; the pages without a record can be read again."""


class WorkerStartFailed(ValueError):
    """A worker could not build its pipeline (a model folder it cannot read): no page can be read this way."""


def available_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads_per_worker(workers: int) -> int:
    """CPU inference threads for each of `workers` workers on this machine: the cores divided between them."""
    return max(1, available_cores() // workers)


def oversubscription(workers: int) -> str:
    """One line of warning when `workers` workers on this machine are more than its cores ("" when they are not):
    each still gets one thread, and they slow each other down."""
    cores = available_cores()
    if workers <= cores:
        return ""
    return (f"warning: {workers} workers on {cores} cores: each gets 1 thread and they share the cores, slower than "
            f"{cores} workers")


class LocalWorker:
    """One pipeline in this process, reading the pages in order (`--workers 1`)."""

    def __init__(self, settings: ReadSettings):
        self.reader = PageReader(settings)

    def read(self, tasks: Iterable[PageTask]) -> Iterator[tuple[PageTask, dict]]:
        for task in tasks:
            yield task, self.reader.read(task)

    def close(self) -> None:
        pass


_reader: PageReader | None = None
_start_error: str = ""


def _end_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _start_process(settings: ReadSettings, threads: int, parent: int) -> None:
    global _reader, _start_error
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent stops us
    threading.Thread(target=_end_with_parent, args=(parent,), daemon=True).start()
    try:
        _reader = PageReader(settings, threads=threads)
    except (ValueError, OSError) as error:  # told to the caller at the first page, instead of a broken pool
        _start_error = str(error)


def _read_in_process(task: PageTask) -> dict:
    if _reader is None:
        raise WorkerStartFailed(_start_error)
    return _reader.read(task)


class ProcessWorkers:
    """`count` processes, each compiling one pipeline with `threads_per_worker(count)` inference threads.

    Each process holds at most one page at a time beyond the one it reads, so a process that dies loses little.
    """

    def __init__(self, settings: ReadSettings, count: int):
        self.count = count
        self.pool = ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_start_process,
                                        initargs=(settings, threads_per_worker(count), os.getpid()))

    def read(self, tasks: Iterable[PageTask]) -> Iterator[tuple[PageTask, dict]]:
        queue, running = list(tasks)[::-1], {}
        try:
            while queue or running:
                while queue and len(running) < 2 * self.count:
                    task = queue.pop()
                    running[self.pool.submit(_read_in_process, task)] = task
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    yield running.pop(future), future.result()
        except BrokenProcessPool as error:
            raise WorkersLost(f"a worker process died ({error})") from None

    def close(self) -> None:
        """Stops the processes at once: a page they are reading has no record yet and is read again by a later run
        (`ProcessPoolExecutor.terminate_workers` does the same from Python 3.14)."""
        processes = list((self.pool._processes or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join()
