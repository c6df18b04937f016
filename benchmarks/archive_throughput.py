"""Archive throughput: pages per minute read by one worker, two worker processes and two Ray actors, in one run.

    python -m benchmarks.archive_throughput [--pages 40] [--rounds 3] [--precision f32] [--json FILE]

Two archives, each read from scratch by every configuration in turn: the ten sample pages, and `--pages` typed
held-out pages with one broken file among them (its one error line is counted, never timed as a page). Each
configuration reads the same pages with the shipped tiny pair through `utils.archive.read_inputs`, as
`python -m utils.ocr FOLDER --out results.jsonl [--workers 2 | --ray]` does, and must write the texts of the
single worker (at f32 they are identical; the script stops otherwise). Figures are medians over --rounds runs,
the configurations' order turning round by round. Pages per minute are over the wall time
of the run, the workers' start included (each imports the compiled models from OpenVINO's model cache, warmed
first, as on any run after the first); "steady" leaves out the time until the first record. Local Ray is
started before the timing, as a running cluster would be, and its start is printed apart; Ray's overhead per page
is the wall time per page of the actors less that of the processes, over the whole run and after the first
record (each run starts its actors anew: Ray starts a worker process for each, and imports the pipeline there).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import interleaved_rounds
from utils.archive import ReadSettings, read_inputs
from utils.archive.workers import available_cores, threads_per_worker
from utils.cli import add_json_option, command_parser, int_at_least, write_json
from utils.engine.device import PRECISIONS
from utils.notebook.archive import page_texts, read_records
from utils.notebook.display import markdown_table

CONFIGURATIONS = {"1 worker": dict(workers=1), "2 processes": dict(workers=2), "Ray, 2 actors": dict(workers=2,
                                                                                                       ray="")}


def write_archives(folder: Path, pages: int) -> dict[str, Path]:
    """{name: folder} of the two archives: the sample pages, and `pages` typed pages with a broken file."""
    from utils.pages.reading_pages import sample_pages
    from utils.pages.sample_archive import write_sample_archive

    samples = folder / "sample pages"
    samples.mkdir(parents=True)
    for number, page in enumerate(sample_pages(), 1):
        page.image.save(samples / f"{number:02d}.png")
    write_sample_archive(folder / "archive", images=pages, pdf_pages=0)
    return {"sample pages": samples, f"{pages} typed pages and a broken file": folder / "archive"}


def measure(archives: dict[str, Path], settings: ReadSettings, work: Path, *, rounds: int) -> list[dict]:
    """One row per (archive, configuration): medians over `rounds` runs, the configurations' order turning round
    by round; every run's texts checked against the first single worker's."""
    rows = []
    for name, folder in archives.items():
        runs, single = {configuration: [] for configuration in CONFIGURATIONS}, None
        for round_index, configuration in interleaved_rounds(list(CONFIGURATIONS), rounds):
            out = work / f"{name} - {configuration} - {round_index}.jsonl"
            runs[configuration].append(read_inputs([folder], out, settings, progress=False,
                                                   **CONFIGURATIONS[configuration]))
            written = page_texts(read_records(out))
            single = single or written
            if written != single:
                raise SystemExit(f"{configuration} wrote other texts than one worker on {name}")
        for configuration, summaries in runs.items():
            rows.append({"archive": name, "configuration": configuration, "pages": summaries[0].read,
                         "errors": summaries[0].failed,
                         "seconds": statistics.median(summary.seconds for summary in summaries),
                         "first record (s)": statistics.median(summary.first_record_seconds for summary in summaries),
                         "pages/min": statistics.median(summary.pages_per_minute for summary in summaries),
                         "steady pages/min": statistics.median(summary.steady_pages_per_minute
                                                               for summary in summaries)})
        base, processes, ray = rows[-3:]
        for row in (base, processes, ray):
            row["over 1 worker"] = row["pages/min"] / base["pages/min"]
        for rate, column in (("pages/min", "Ray overhead per page (ms)"),
                             ("steady pages/min", "steady Ray overhead per page (ms)")):
            ray[column] = 60_000 / ray[rate] - 60_000 / processes[rate]  # wall time per page, Ray's over processes'
        ray["Ray over processes"] = ray["pages/min"] / processes["pages/min"]
    return rows


def _formatted(row: dict) -> dict:
    return {key: f"{value:.2f}" if isinstance(value, float) else value for key, value in row.items()}


def main(argv: list[str] | None = None) -> None:
    parser = command_parser("benchmarks.archive_throughput", __doc__.split("\n\n", 1)[1])
    parser.add_argument("--pages", metavar="N", type=int_at_least(2), default=40, help="typed pages of the archive")
    parser.add_argument("--rounds", metavar="N", type=int_at_least(1), default=3,
                        help="runs of every configuration on each archive (medians)")
    parser.add_argument("--precision", choices=PRECISIONS, default="f32",
                        help="the target's and the draft's (f32: the texts of every configuration are identical)")
    add_json_option(parser, what="the rows")
    args = parser.parse_args(argv)
    import ray

    from utils.archive import PageReader
    from utils.archive.ray_workers import start_local_ray
    from utils.models import compiled_cache_dir, default_ir_pair

    target, draft = map(str, default_ir_pair())
    settings = ReadSettings(target, draft, device="CPU", precision=args.precision, draft_precision=args.precision,
                            cache_dir=str(compiled_cache_dir()))
    for threads in {None, 1, threads_per_worker(2)}:  # every start below imports the compiled models, as a rerun does
        PageReader(settings, threads=threads)
    started = time.perf_counter()
    start_local_ray()
    print(f"local Ray started in {time.perf_counter() - started:.1f} s (not timed below); {available_cores()} cores")
    with tempfile.TemporaryDirectory() as folder:
        rows = measure(write_archives(Path(folder) / "inputs", args.pages), settings, Path(folder), rounds=args.rounds)
    ray.shutdown()
    print(markdown_table([_formatted(row) for row in rows],
                         ["archive", "configuration", "pages", "errors", "seconds", "first record (s)", "pages/min",
                          "steady pages/min", "over 1 worker", "Ray over processes", "Ray overhead per page (ms)",
                          "steady Ray overhead per page (ms)"]))
    if args.json:
        write_json(args.json, {"precision": args.precision, "cores": available_cores(), "rounds": args.rounds,
                               "rows": rows})


if __name__ == "__main__":
    sys.exit(main())
