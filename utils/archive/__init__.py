"""Reading a document archive: many files and pages, one record per page, resumable, on several workers.

    files and folders -> pages (file, page, content hash)          `pages`
                      -> workers, each compiling one pipeline       `reader`, `workers` (processes), `ray_workers`
                      -> one writer appending a record per page     `results`, `run`

The writer is the only part that knows what is done: a page is done when its record is in the results file,
so resuming after a crash and reading again the pages of a worker that died are one rule (read what has no
record). Workers are this process, processes on this machine, or Ray actors when one machine is not enough;
the pipeline never knows which runs it. `python -m utils.ocr FOLDER --out results.jsonl` is the command line.
"""

from utils.archive.pages import PageTask, list_pages
from utils.archive.reader import PageReader, ReadSettings
from utils.archive.results import ResultsFile
from utils.archive.run import ArchiveSummary, read_archive, read_inputs, worker_starter

__all__ = ["PageTask", "list_pages", "PageReader", "ReadSettings", "ResultsFile", "ArchiveSummary", "read_archive",
           "read_inputs", "worker_starter"]
