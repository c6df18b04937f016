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
from utils.archive.results import ResultsFile, read_results, record_key
from utils.archive.workers import LocalWorker, ProcessWorkers, WorkersLost
from utils.cli import plural

__all__ = ["WORKER_STARTS", "ArchiveSummary", "ArchiveInterrupted", "page_name", "read_archive", "worker_starter",
           "read_inputs"]

WORKER_STARTS = 3  # how often workers are started for one run: the first time, and again after all died


@dataclass
class ArchiveSummary:
    """What a run did: pages read now and earlier, failures (this run's and earlier ones), notices, the inputs skipped
    as repeats, tokens and time."""

    pages: int  # in the archive
    read: int  # in this run, without an error
    earlier: int  # skipped: read without an error by an earlier run
    failed: int  # pages (or unlistable files) whose latest record is an error, this run's or an earlier one's
    errors: int  # pages whose reading failed in this run
    notices: int  # pages read in this run whose record has a `notice` (the model cannot read such a page well)
    duplicates: int  # inputs skipped: the same file, or the same bytes, as an earlier input
    unread: int  # without a record when every start of the workers had died
    tokens: int
    steps: int
    seconds: float  # wall time from `started` (the command's start: export and the workers' start included)
    first_record_seconds: float | None  # from `started` until the first record of this run
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
        records = "its record" if self.failed == 1 else "their records"
        failed = (f"{self.failed} failed ({records} in {self.results} {'has' if self.failed == 1 else 'have'} an "
                  "\"error\")" if self.failed else "none failed")
        unread = f", {self.unread} left unread (run again to read them)" if self.unread else ""
        records = "its record" if self.notices == 1 else "their records"
        notices = f", {plural(self.notices, 'page')} read with a notice: see {records}" if self.notices else ""
        if self.read:
            rates = (f"{self.tokens} tokens at {self.tokens_per_step:.2f} tokens/step, {self.pages_per_minute:.1f} "
                     "pages/min, ")
        else:
            rates = "" if self.errors else "nothing left to read, "
        return (f"{plural(self.read, 'page')} read ({self.earlier} earlier), {failed}{unread}{notices}; {rates}"
                f"{self.seconds:.1f} s")

    @property
    def complete(self) -> bool:
        """Every page has a record without an error."""
        return not self.failed and not self.unread


class ArchiveInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (SIGINT): the workers are closed, every record written so far is kept."""

    def __init__(self, read: int, left: int):
        super().__init__(f"interrupted: {plural(read, 'page')} read in this run, {left} left; run the same command "
                         "to resume")
        self.read, self.left = read, left


def _tell(line: str) -> None:
    """One line on stderr, above the progress bar if there is one."""
    from tqdm.auto import tqdm

    tqdm.write(line, file=sys.stderr)


def page_name(record: dict) -> str:
    """`scans/page-01.png`, or `letters/bundle.pdf page 2`: a record's page as lines name it."""
    return record["file"] + ("" if record["page"] is None else f" page {record['page']}")


def _interrupted(listing: Listing, results: ResultsFile, done: set, written: int) -> ArchiveInterrupted:
    """How far an interrupted run came, from the results file itself: Ctrl-C may land between a record's write and
    its count."""
    new = {record_key(record) for record in read_results(results.path)[written:]} if results.path.exists() else set()
    done = done | new
    return ArchiveInterrupted(len(new), sum(task.key not in done for task in listing.pages))


def read_archive(listing: Listing, results: ResultsFile, start_workers: Callable[[], object], *,
                 retry_failed: bool = False, progress: bool = True, started: float | None = None) -> ArchiveSummary:
    """Reads every page of `listing` that has no record in `results`, appending a record per page. The inputs
    skipped as repeats and each page's notice are told on stderr as one line each. No worker is started when no
    page is left to read.

    Args:
        listing: the archive's pages, and error records of files that could not be listed.
        results: the results file, open to append.
        start_workers: makes the workers (`LocalWorker`, `ProcessWorkers`, `RayWorkers`): called once, and again
            when all of them died, at most `WORKER_STARTS` times.
        retry_failed: read again the pages whose records are errors.
        progress: show a progress bar (on stderr).
        started: the `time.perf_counter()` the run's wall time counts from (default: now), such as the command's
            start, before it exported or compiled anything.

    Raises:
        ArchiveInterrupted: on Ctrl-C, once the workers are closed.
    """
    from tqdm.auto import tqdm

    started = time.perf_counter() if started is None else started
    if listing.duplicates:
        _tell(listing.duplicates_line())
    done = results.done(retry_failed=retry_failed)
    for failure in listing.failures:
        if record_key(failure) not in done:
            results.append(failure)
    pending = [task for task in listing.pages if task.key not in done]
    written = len(results.records)  # records in the file before this run's first page
    read_earlier = results.done(retry_failed=True)  # records of readings, not of errors
    earlier = sum(task.key in read_earlier for task in listing.pages)
    read = tokens = steps = errors = notices = 0
    first_record = None
    bar = tqdm(total=len(pending), unit="page", disable=not (progress and pending), file=sys.stderr, desc="pages")
    try:
        for start in range(WORKER_STARTS):
            if not pending:
                break
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
                    if record.get("notice"):
                        notices += 1
                        _tell(f"{page_name(record)}: {' '.join(record['notice'].split())}")
                    bar.update()
                    bar.set_postfix(tok_s=f"{tokens / (time.perf_counter() - started):.1f}", errors=errors)
                break
            except WorkersLost as lost:
                pending = [task for task in pending if task.key not in done]
                left = plural(len(pending), "page")
                _tell(f"{lost}; {left} left, starting workers again" if start + 1 < WORKER_STARTS
                      else f"{lost}; {left} left unread: run the command again to read them")
            finally:
                workers.close()
    except KeyboardInterrupt:
        raise _interrupted(listing, results, done, written) from None
    finally:
        bar.close()
    archive_keys = {task.key for task in listing.pages} | {record_key(failure) for failure in listing.failures}
    failed = sum(key in archive_keys for key in results.failed())
    return ArchiveSummary(pages=len(listing.pages), read=read, earlier=earlier, failed=failed, errors=errors,
                          notices=notices, duplicates=len(listing.duplicates),
                          unread=sum(task.key not in done for task in listing.pages), tokens=tokens, steps=steps,
                          seconds=time.perf_counter() - started, first_record_seconds=first_record,
                          results=str(results.path))


def worker_starter(settings: ReadSettings, *, workers: int = 1, ray: str | None = None) -> Callable[[], object]:
    """What starts the workers of a run: this process (1 worker), `workers` processes, or, when `ray` is not None,
    `workers` Ray actors (`ray` = "": local Ray, or the cluster $RAY_ADDRESS names; else a cluster's address).

    Raises ValueError, at once, when no Ray cluster answers at the address (`check_ray_address`)."""
    if ray is not None:
        from utils.archive.ray_workers import RayWorkers, check_ray_address

        check_ray_address(ray or None)
        return lambda: RayWorkers(settings, workers, address=ray or None)
    if workers > 1:
        return lambda: ProcessWorkers(settings, workers)
    return lambda: LocalWorker(settings)


def read_inputs(inputs: list[Path | str], out: Path | str, settings: ReadSettings, *, workers: int = 1,
                ray: str | None = None, retry_failed: bool = False, progress: bool = True,
                started: float | None = None) -> ArchiveSummary:
    """Lists the pages of `inputs` (files and folders) and reads them into the results file `out`: the whole of
    `python -m utils.ocr INPUTS --out OUT`, for notebooks and scripts. Arguments as `read_archive`,
    `worker_starter`; a Ray address where no cluster answers is refused before `out` is opened."""
    listing = list_pages(inputs)
    start_workers = worker_starter(settings, workers=workers, ray=ray)
    with ResultsFile(out, settings.as_record()) as results:
        results.check_names(listing.pages)
        return read_archive(listing, results, start_workers, retry_failed=retry_failed, progress=progress,
                            started=started)
