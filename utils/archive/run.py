"""The driver of an archive: the single writer that knows what is done, with a progress bar and a summary.

`read_archive` skips the pages whose records are in the results file, hands the rest to the workers, appends
each record as it arrives, and, if every worker dies, starts new ones for the pages still without a record
(the same rule as a resumed run).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from utils.archive.pages import Listing, list_pages
from utils.archive.reader import ReadSettings
from utils.archive.results import ResultsFile, record_key
from utils.archive.workers import LocalWorker, ProcessWorkers, WorkersLost

__all__ = ["WORKER_STARTS", "ArchiveSummary", "read_archive", "worker_starter", "read_inputs"]

WORKER_STARTS = 3  # how often workers are started for one run: the first time, and again after all died


@dataclass
class ArchiveSummary:
    """What a run did: pages read now and earlier, failures (this run's and earlier ones), tokens and time."""

    pages: int  # in the archive
    read: int  # in this run, without an error
    earlier: int  # skipped: read without an error by an earlier run
    failed: int  # pages (or unlistable files) whose latest record is an error, this run's or an earlier one's
    unread: int  # without a record when every start of the workers had died
    tokens: int
    steps: int
    seconds: float  # wall time, the workers' start (compiling their pipelines) included
    first_record_seconds: float | None  # until the first record of this run: the workers' start and one page
    results: str  # the results file

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def pages_per_minute(self) -> float:
        """Pages read per minute of wall time."""
        return 60.0 * self.read / self.seconds if self.seconds else 0.0

    @property
    def steady_pages_per_minute(self) -> float | None:
        """Pages read per minute after the first record: the rate once the workers run (None under two pages)."""
        if self.first_record_seconds is None or self.read < 2:
            return None
        return 60.0 * (self.read - 1) / (self.seconds - self.first_record_seconds)

    def as_dict(self) -> dict:
        return asdict(self) | {"tokens_per_step": self.tokens_per_step, "pages_per_minute": self.pages_per_minute,
                               "steady_pages_per_minute": self.steady_pages_per_minute}

    def __str__(self) -> str:
        failed = (f"{self.failed} failed (their records in {self.results} have an \"error\")" if self.failed
                  else "none failed")
        unread = f", {self.unread} left unread (run again to read them)" if self.unread else ""
        rates = (f"{self.tokens} tokens at {self.tokens_per_step:.2f} tokens/step, {self.pages_per_minute:.1f} "
                 "pages/min, " if self.read else "nothing left to read, ")
        return (f"{self.read} pages read ({self.earlier} earlier), {failed}{unread}; {rates}"
                f"{self.seconds:.1f} s")

    @property
    def complete(self) -> bool:
        """Every page has a record without an error."""
        return not self.failed and not self.unread


def read_archive(listing: Listing, results: ResultsFile, start_workers: Callable[[], object], *,
                 retry_failed: bool = False, progress: bool = True) -> ArchiveSummary:
    """Reads every page of `listing` that has no record in `results`, appending a record per page.

    Args:
        listing: the archive's pages, and error records of files that could not be listed.
        results: the results file, open to append.
        start_workers: makes the workers (`LocalWorker`, `ProcessWorkers`, `RayWorkers`): called once, and again
            when all of them died, at most `WORKER_STARTS` times.
        retry_failed: read again the pages whose records are errors.
        progress: show a progress bar (on stderr).
    """
    from tqdm.auto import tqdm

    started = time.perf_counter()
    done = results.done(retry_failed=retry_failed)
    for failure in listing.failures:
        if record_key(failure) not in done:
            results.append(failure)
    pending = [task for task in listing.pages if task.key not in done]
    read_earlier = results.done(retry_failed=True)  # records of readings, not of errors
    earlier = sum(task.key in read_earlier for task in listing.pages)
    read = tokens = steps = errors = 0
    first_record = None
    bar = tqdm(total=len(pending), unit="page", disable=not progress, file=sys.stderr, desc="pages")
    for start in range(WORKER_STARTS):
        workers = start_workers()
        try:
            for task, record in workers.read(pending):
                results.append(record)
                done.add(task.key)
                first_record = first_record or time.perf_counter() - started
                if "error" in record:
                    errors += 1
                else:
                    read, tokens, steps = read + 1, tokens + record["tokens"], steps + record["steps"]
                bar.update()
                bar.set_postfix(tok_s=f"{tokens / (time.perf_counter() - started):.1f}", errors=errors)
            break
        except WorkersLost as lost:
            pending = [task for task in pending if task.key not in done]
            bar.write(f"{lost}; {len(pending)} pages left, starting workers again" if start + 1 < WORKER_STARTS
                      else f"{lost}; {len(pending)} pages left unread: run the command again to read them")
        finally:
            workers.close()
    bar.close()
    archive_keys = {task.key for task in listing.pages} | {record_key(failure) for failure in listing.failures}
    failed = sum(key in archive_keys for key in results.failed())
    return ArchiveSummary(pages=len(listing.pages), read=read, earlier=earlier, failed=failed,
                          unread=sum(task.key not in done for task in listing.pages), tokens=tokens, steps=steps,
                          seconds=time.perf_counter() - started, first_record_seconds=first_record,
                          results=str(results.path))


def worker_starter(settings: ReadSettings, *, workers: int = 1, ray: str | None = None) -> Callable[[], object]:
    """What starts the workers of a run: this process (1 worker), `workers` processes, or, when `ray` is not None,
    `workers` Ray actors (`ray` = "": local Ray, or the cluster $RAY_ADDRESS names; else a cluster's address)."""
    if ray is not None:
        from utils.archive.ray_workers import RayWorkers

        return lambda: RayWorkers(settings, workers, address=ray or None)
    if workers > 1:
        return lambda: ProcessWorkers(settings, workers)
    return lambda: LocalWorker(settings)


def read_inputs(inputs: list[Path | str], out: Path | str, settings: ReadSettings, *, workers: int = 1,
                ray: str | None = None, retry_failed: bool = False, progress: bool = True) -> ArchiveSummary:
    """Lists the pages of `inputs` (files and folders) and reads them into the results file `out`: the whole of
    `python -m utils.ocr INPUTS --out OUT`, for notebooks and scripts. Arguments as `read_archive`,
    `worker_starter`."""
    listing = list_pages(inputs)
    with ResultsFile(out, settings.as_record()) as results:
        return read_archive(listing, results, worker_starter(settings, workers=workers, ray=ray),
                            retry_failed=retry_failed, progress=progress)
