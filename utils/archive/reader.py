"""One worker's reading: a pipeline compiled once, and each page read into a record (or an error record).

A page that cannot be read (an unreadable image, a file changed since it was listed, a page the pair cannot
read) is a record with the one-line `error` the pipeline gives; the worker goes on with the next page.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict, dataclass

from utils.archive.pages import PageTask
from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD
from utils.engine.step_cost import StepCost
from utils.files import sha256_file, sha256_folder
from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT

__all__ = ["ReadSettings", "PageReader", "page_image", "worker_name"]


@dataclass(frozen=True)
class ReadSettings:
    """How every page of an archive is read: the model folders and the pipeline's settings (picklable, so a
    process or a Ray actor can build its own pipeline from it)."""

    target: str
    draft: str | None = None
    device: str | None = None
    precision: str = "default"
    draft_precision: str = "default"
    prompt: str = DEFAULT_PROMPT
    max_new_tokens: int = 512
    num_assistant_tokens: int | None = None
    markov_head_top_k: int | None = None
    confidence_threshold: float = DEFAULT_CONFIDENCE_THRESHOLD
    step_cost: tuple[float, float] | None = None  # (fixed ms, ms per verified draft): `StepCost`
    chat_template_kwargs: dict | None = None
    cache_dir: str | None = None  # OpenVINO's model cache: a worker's start imports what an earlier one compiled

    def as_record(self) -> dict:
        """The settings that decide a page's reading, as records hold them (JSON types: a step cost is a list), with
        the SHA-256 of the target's and the draft's folders (`target_digest`, `draft_digest`): a model replaced at
        the same path is another setting. Hashes the folders' files: call it once per run."""
        record = asdict(self) | {"step_cost": None if self.step_cost is None else list(self.step_cost)}
        del record["cache_dir"]  # where compiled models are kept changes no reading
        return record | {"target_digest": sha256_folder(self.target),
                         "draft_digest": None if self.draft is None else sha256_folder(self.draft)}


def page_image(task: PageTask):
    """The page's image: the image file decoded, or the PDF page rendered."""
    from utils.pipeline.preprocessing.image_io import load_rgb_image
    from utils.pipeline.preprocessing.pdf import PdfPages

    if task.page is None:
        return load_rgb_image(task.path, name=task.file)
    with PdfPages(task.path, name=task.file) as document:
        return document.render(task.page)


def worker_name() -> str:
    """This worker's name in records: host and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


class PageReader:
    """Compiles the pipeline of `settings` once; `read` turns one page into its record.

    Args:
        settings: the model folders and the pipeline's settings.
        threads: CPU threads of each compiled model and of numpy's BLAS in this process (None: every core).
    """

    def __init__(self, settings: ReadSettings, *, threads: int | None = None):
        from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

        if threads is not None:  # numpy's BLAS too: two workers of two BLAS threads each on two cores lose 10-15%
            import threadpoolctl

            threadpoolctl.threadpool_limits(threads)
        self.settings, self.threads = settings, threads
        self.pipeline = SpeculativeOcrPipeline(settings.target, settings.draft, device=settings.device,
                                               precision=settings.precision, draft_precision=settings.draft_precision,
                                               threads=threads, cache_dir=settings.cache_dir,
                                               chat_template_kwargs=settings.chat_template_kwargs)
        self.worker = worker_name()
        self._hashed: tuple[tuple, str] = ((), "")  # (path, mtime, size) of the last file hashed, and its SHA-256

    def _check_unchanged(self, task: PageTask) -> None:
        """Raises ValueError if the file is not the one listed. A file is hashed once per version, not once per
        page: a PDF's pages follow one another."""
        stat = os.stat(task.path)
        version = (task.path, stat.st_mtime_ns, stat.st_size)
        if self._hashed[0] != version:
            self._hashed = (version, sha256_file(task.path))
        if self._hashed[1] != task.sha256:
            raise ValueError(f"{task.file} changed since the archive was listed; run the command again to read it")

    def read(self, task: PageTask) -> dict:
        """The record of one page: its text and figures, or the one-line error that kept it from being read."""
        settings, started = self.settings, time.perf_counter()
        record = {"file": task.file, "page": task.page, "sha256": task.sha256, "path": task.path}
        try:
            self._check_unchanged(task)
            result = self.pipeline.generate(
                page_image(task), settings.prompt, max_new_tokens=settings.max_new_tokens,
                num_assistant_tokens=settings.num_assistant_tokens, markov_head_top_k=settings.markov_head_top_k,
                confidence_threshold=settings.confidence_threshold,
                step_cost=None if settings.step_cost is None else StepCost(*settings.step_cost))
        except (ValueError, OSError) as error:
            return record | {"error": str(error), "worker": self.worker}
        metrics = result.metrics
        return record | {"text": result.texts[0], "tokens": metrics.num_generated_tokens, "steps": metrics.num_steps,
                         "tokens_per_step": metrics.mean_tokens_per_step,
                         "seconds": time.perf_counter() - started, "device": self.pipeline.device,
                         "precision": self.pipeline.inference_precision or settings.precision,
                         "draft_precision": self.pipeline.draft_inference_precision or None,
                         "notice": result.notice or None, "worker": self.worker}
