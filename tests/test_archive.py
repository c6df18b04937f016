"""Reading an archive: one record per page, errors recorded and the run going on, resume after SIGKILL with every
page once, a changed file read again, worker processes and Ray actors writing the texts of one worker, and an
actor killed mid-run whose page the others read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from PIL import Image

from pdfs import broken_pdf, encrypted_pdf
from utils.archive import PageReader, ReadSettings, ResultsFile, list_pages, read_archive
from utils.archive.workers import LocalWorker, ProcessWorkers
from utils.cli import plural
from utils.pages.sample_archive import BROKEN_FILE, write_sample_archive
from utils.models import REPO_ROOT, default_ir_pair


@pytest.fixture(scope="module")
def shipped_ir():
    return tuple(map(str, default_ir_pair()))


@pytest.fixture(scope="module")
def settings(shipped_ir):
    """The shipped pair at f32 on the CPU: every worker writes the same tokens."""
    return ReadSettings(*shipped_ir, device="CPU", precision="f32", draft_precision="f32")


@pytest.fixture(scope="module")
def reader(settings):
    """One pipeline in this process: what the archive's workers must write, page by page."""
    return PageReader(settings)


def _one_by_one(reader, folder) -> dict[str, str]:
    """{page name: text} of every readable page of `folder`, each read on its own by `reader`."""
    return _texts([reader.read(task) for task in list_pages([folder]).pages])


@pytest.fixture
def archive(tmp_path, reader):
    """Six typed pages (four PNGs, a two-page PDF) and a broken file, with each page's reading on its own."""
    folder = tmp_path / "archive"
    typed = write_sample_archive(folder, images=4, pdf_pages=2)
    texts = _one_by_one(reader, folder)
    assert texts.keys() == typed.keys()
    return folder, texts


@pytest.fixture
def long_archive(tmp_path, reader):
    """Twenty-six typed pages and a broken file: a run is still far from its end seconds after its first record, so
    a signal sent then lands mid-run however slowly a loaded machine schedules the test that sends it (with six
    pages, two workers could finish the archive first)."""
    folder = tmp_path / "long-archive"
    typed = write_sample_archive(folder, images=24, pdf_pages=2)
    texts = _one_by_one(reader, folder)
    assert texts.keys() == typed.keys()
    return folder, texts


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _texts(records) -> dict[str, str]:
    return {record["file"] + ("" if record["page"] is None else f" page {record['page']}"): record.get("text")
            for record in records if "error" not in record}


def _ocr(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "utils.ocr", *argv], capture_output=True, text=True, cwd=REPO_ROOT,
                          env=os.environ | {"PYTHONPATH": str(REPO_ROOT)}, timeout=600, **kwargs)


def test_a_folder_is_walked_sorted_without_hidden_files_and_a_pdf_it_cannot_open_is_one_error(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / ".hidden").mkdir()
    for name in ("b/2.png", "b/10.png", "a.jpg", ".secret.png", ".hidden/x.png", "notes.txt"):
        (tmp_path / name).write_bytes(name.encode())
    encrypted_pdf(tmp_path / "locked.pdf")
    broken_pdf(tmp_path / "b" / "cut.pdf")
    listing = list_pages([tmp_path])
    assert [task.file for task in listing.pages] == ["a.jpg", "b/10.png", "b/2.png"]
    assert [(failure["file"], failure["page"]) for failure in listing.failures] == [("b/cut.pdf", None),
                                                                                    ("locked.pdf", None)]
    assert "is not a readable PDF" in listing.failures[0]["error"] and "encrypted" in listing.failures[1]["error"]
    assert all(task.path.startswith("/") and len(task.sha256) == 64 for task in listing.pages)


def test_names_that_records_would_confuse_and_folders_with_nothing_to_read_are_refused(tmp_path):
    for folder in ("one", "two", "empty"):
        (tmp_path / folder).mkdir()
    (tmp_path / "one" / "a.png").write_bytes(b"1")
    (tmp_path / "two" / "a.png").write_bytes(b"2")
    with pytest.raises(ValueError, match="two inputs are both named a.png"):
        list_pages([tmp_path / "one", tmp_path / "two"])
    with pytest.raises(ValueError, match="holds no images or PDFs"):
        list_pages([tmp_path / "empty"])


def test_the_results_file_drops_a_cut_last_line_and_refuses_other_settings_and_other_files(tmp_path):
    path = tmp_path / "results.jsonl"
    with ResultsFile(path, {"max_new_tokens": 8}) as results:
        results.append({"file": "a.png", "page": None, "sha256": "1", "text": "A"})
        results.append({"file": "b.png", "page": None, "sha256": "2", "error": "b.png is not an image"})
    with open(path, "a") as file:
        file.write('{"file": "c.png", "page": null, "sha256": "3", "te')  # a crash in the middle of a line
    with ResultsFile(path, {"max_new_tokens": 8}) as results:
        assert results.dropped_cut_line and len(results.records) == 2
        assert results.done() == {("a.png", None, "1"), ("b.png", None, "2")}
        assert results.done(retry_failed=True) == {("a.png", None, "1")}
        assert list(results.failed()) == [("b.png", None, "2")]
    assert path.read_text().endswith('"error": "b.png is not an image", "timestamp": "%s", "settings": '
                                     '{"max_new_tokens": 8}}\n' % _records(path)[-1]["timestamp"])
    with pytest.raises(ValueError, match="other settings"):
        ResultsFile(path, {"max_new_tokens": 9})
    (tmp_path / "other.jsonl").write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="line 1 is not a page record"):
        ResultsFile(tmp_path / "other.jsonl", {})


@pytest.mark.slow
def test_an_archive_is_one_record_per_page_and_a_bad_file_one_error_line(archive, shipped_ir, tmp_path):
    folder, texts = archive
    out = tmp_path / "results.jsonl"
    completed = _ocr(str(folder), "--out", str(out), "--precision", "f32", "--device", "CPU")
    assert completed.returncode == 1, completed.stderr  # some pages failed
    records = _records(out)
    errors = [record for record in records if "error" in record]
    assert [(record["file"], record["error"]) for record in errors] == [
        (BROKEN_FILE, f"{BROKEN_FILE} is not an image PIL can read")]
    assert _texts(records) == texts  # every page read once, as on its own
    assert len(records) == len(texts) + 1 and "1 failed" in completed.stderr and str(out) in completed.stderr
    assert "6 pages read (0 earlier)" in completed.stderr.splitlines()[-1]
    page = next(record for record in records if record["file"] == "letters/bundle.pdf" and record["page"] == 2)
    assert page["precision"] == "f32" and page["device"] == "CPU" and page["tokens"] > 0 and page["seconds"] > 0
    assert page["tokens_per_step"] == pytest.approx(page["tokens"] / page["steps"])
    assert page["settings"]["target"] == shipped_ir[0] and page["settings"]["max_new_tokens"] == 512


def test_one_pipeline_reads_every_file_of_a_worker(archive, settings, tmp_path, monkeypatch):
    from utils.pipeline import speculative_ocr

    built = []
    original = speculative_ocr.SpeculativeOcrPipeline.__init__
    monkeypatch.setattr(speculative_ocr.SpeculativeOcrPipeline, "__init__",
                        lambda self, *args, **kwargs: built.append(1) or original(self, *args, **kwargs))
    with ResultsFile(tmp_path / "r.jsonl", settings.as_record()) as results:
        summary = read_archive(list_pages([archive[0]]), results, lambda: LocalWorker(settings), progress=False)
    assert summary.read == 6 and summary.failed == 1 and not summary.complete and len(built) == 1


@pytest.mark.slow
def test_a_rerun_skips_what_was_read_and_reads_a_changed_file_again(archive, tmp_path):
    folder, texts = archive
    out = tmp_path / "results.jsonl"
    arguments = (str(folder / "scans"), "--out", str(out), "--precision", "f32", "--device", "CPU", "--json")
    first = json.loads(_ocr(*arguments).stdout)
    assert (first["read"], first["earlier"], first["failed"]) == (4, 0, 1)
    second = json.loads(_ocr(*arguments).stdout)
    assert (second["read"], second["earlier"], second["failed"]) == (0, 4, 1) and len(_records(out)) == 5
    # page 1's pixels in other bytes: a changed file, not a copy of page 1 (which would be skipped as a duplicate)
    Image.open(folder / "scans" / "page-01.png").save(folder / "scans" / "page-03.png", compress_level=0)
    third = json.loads(_ocr(*arguments).stdout)
    assert (third["read"], third["earlier"]) == (1, 3)
    latest = _records(out)[-1]
    assert latest["file"] == "page-03.png" and latest["text"] == texts["scans/page-01.png"]  # names from the folder given
    fourth = _ocr(*arguments[:-1])  # without --json: the summary line says there was nothing left
    assert "0 pages read (4 earlier), 1 failed" in fourth.stderr and "nothing left to read" in fourth.stderr


@pytest.mark.slow
def test_a_run_killed_mid_archive_resumes_with_every_page_once_and_the_texts_of_an_uninterrupted_run(
        tmp_path, reader):
    folder = tmp_path / "archive"
    write_sample_archive(folder, images=8, pdf_pages=2, broken=False)
    texts = _one_by_one(reader, folder)
    out = tmp_path / "results.jsonl"
    arguments = [sys.executable, "-m", "utils.ocr", str(folder), "--out", str(out), "--precision", "f32",
                 "--device", "CPU", "--quiet"]
    run = subprocess.Popen(arguments, cwd=REPO_ROOT, env=os.environ | {"PYTHONPATH": str(REPO_ROOT)},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while (not out.exists() or len(out.read_text().splitlines()) < 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGKILL)  # no polite stop: whatever was half-done stays half-done
    run.wait()
    before = len(_records(out))
    assert 3 <= before < len(texts), "the run was not killed mid-archive"
    with open(out, "a") as file:
        file.write('{"file": "scans/page-08.png", "page": null, "sha')  # and a line cut by the crash
    resumed = _ocr(*arguments[3:])
    assert resumed.returncode == 0, resumed.stderr
    records = _records(out)
    keys = [(record["file"], record["page"]) for record in records]
    assert len(keys) == len(set(keys)) == len(texts)  # nothing lost, nothing twice
    assert _texts(records) == texts
    assert f"{len(texts) - before} pages read ({before} earlier)" in resumed.stderr


@pytest.mark.slow
def test_ctrl_c_on_worker_processes_is_one_line_exit_130_and_the_same_command_resumes(long_archive, tmp_path):
    folder, texts = long_archive
    out = tmp_path / "results.jsonl"
    arguments = [str(folder), "--out", str(out), "--precision", "f32", "--device", "CPU", "--workers", "2", "--quiet"]
    run = subprocess.Popen([sys.executable, "-m", "utils.ocr", *arguments], cwd=REPO_ROOT, text=True,
                           env=os.environ | {"PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 300
    while (not out.exists() or not out.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(run.pid, signal.SIGINT)  # as Ctrl-C in a terminal: the command and its worker processes
    stderr = run.communicate(timeout=60)[1]
    written = len(_records(out))  # however close to a record's write the signal came, the line counts what is in
    assert run.returncode == 130 and stderr == (f"interrupted: {plural(written, 'page')} read in this run, "
                                                f"{len(texts) + 1 - written} left; run the same command to resume\n")
    resumed = _ocr(*arguments)
    records = _records(out)
    assert resumed.returncode == 1 and _texts(records) == texts  # the broken file's error, every page once
    assert len(records) == len(texts) + 1


@pytest.mark.slow
def test_two_worker_processes_write_the_texts_of_one_and_a_dead_process_s_pages_are_read_again(
        archive, settings, tmp_path):
    folder, texts = archive

    class KillsAWorkerOnce(ResultsFile):
        """Kills the process that wrote the first record, in the middle of the run."""

        def append(self, record):
            super().append(record)
            if len(self.records) == 2:
                os.kill(int(record["worker"].rsplit(":", 1)[1]), signal.SIGKILL)

    starts = []
    with KillsAWorkerOnce(tmp_path / "r.jsonl", settings.as_record()) as results:
        summary = read_archive(list_pages([folder]), results,
                               lambda: starts.append(1) or ProcessWorkers(settings, 2), progress=False)
    records = _records(tmp_path / "r.jsonl")
    assert _texts(records) == texts and len(records) == len(texts) + 1  # each page once, the broken file's error
    assert len(starts) == 2 and summary.read + summary.earlier == len(texts)  # the workers started again once
    assert len({record["worker"] for record in records}) >= 2


def test_archive_options_need_out_and_out_takes_no_page_range(archive, tmp_path):
    folder, _ = archive
    for arguments, message in [([str(folder)], "a folder needs --out RESULTS.jsonl"),
                               ([str(folder / "scans" / "page-01.png"), "--workers", "2"], "--workers needs --out"),
                               ([str(folder / "letters" / "bundle.pdf"), "--out", str(tmp_path / "r.jsonl"),
                                 "--pages", "1"], "--pages reads pages of one PDF")]:
        completed = _ocr(*arguments)
        assert completed.returncode == 2 and message in completed.stderr, completed.stderr
        assert completed.stderr.count("\n") == 1 and not (tmp_path / "r.jsonl").exists()


@pytest.fixture(scope="module")
def local_ray():
    """Local Ray with two CPUs, no dashboard and a small object store, shared by the module's tests."""
    import ray

    from utils.archive.ray_workers import start_local_ray

    start_local_ray(2)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_actors_write_the_texts_of_one_worker_and_a_killed_actor_s_page_is_read_by_the_others(
        local_ray, archive, settings, tmp_path):
    from utils.archive.ray_workers import RayWorkers

    folder, texts = archive
    pools = []

    class KillsABusyActor(ResultsFile):
        """Kills an actor that is reading a page, once the first record is in."""

        def append(self, record):
            super().append(record)
            if len(self.records) == 1:
                busy, _ = next(iter(pools[0].running.values()))
                local_ray.kill(busy)

    with KillsABusyActor(tmp_path / "r.jsonl", settings.as_record()) as results:
        summary = read_archive(list_pages([folder]), results,
                               lambda: pools.append(RayWorkers(settings, 2)) or pools[-1], progress=False)
    records = _records(tmp_path / "r.jsonl")
    assert len(pools) == 1 and _texts(records) == texts and len(records) == len(texts) + 1
    assert summary.read == len(texts) and summary.failed == 1
    assert local_ray.is_initialized()  # a Ray it did not start is left running


def test_workers_that_share_the_cpu_take_their_threads_unpinned_and_start_from_the_model_cache():
    from utils.engine.device import compile_properties

    shared = compile_properties("CPU", precision="f32", threads=1, cache_dir="/cache")
    assert shared["INFERENCE_NUM_THREADS"] == 1 and shared["ENABLE_CPU_PINNING"] is False
    assert shared["CACHE_DIR"] == "/cache" and shared["INFERENCE_PRECISION_HINT"] == "f32"
    assert "INFERENCE_NUM_THREADS" not in compile_properties("GPU", threads=1)  # a CPU property only
    assert "INFERENCE_NUM_THREADS" not in compile_properties("CPU")  # one process: OpenVINO's own choice
    with pytest.raises(ValueError, match="threads=0 must be at least 1"):
        compile_properties("CPU", threads=0)


def test_a_worker_that_cannot_build_its_pipeline_stops_the_run_with_its_reason(archive, tmp_path):
    broken = ReadSettings(str(tmp_path), device="CPU", precision="f32")  # a folder that is no target export
    with ResultsFile(tmp_path / "r.jsonl", broken.as_record()) as results, pytest.raises(ValueError) as raised:
        read_archive(list_pages([archive[0]]), results, lambda: ProcessWorkers(broken, 2), progress=False)
    assert str(tmp_path) in str(raised.value) and "Traceback" not in str(raised.value)
    assert not (tmp_path / "r.jsonl").exists()  # no page recorded as read, and no empty results file


@pytest.mark.slow
def test_the_command_line_reads_on_a_local_ray_it_starts_and_stops(archive, tmp_path):
    folder, texts = archive
    completed = _ocr(str(folder), "--out", str(tmp_path / "r.jsonl"), "--precision", "f32", "--draft-precision",
                     "f32", "--device", "CPU", "--ray", "--workers", "2", "--json")
    assert completed.returncode == 1, completed.stderr  # the broken file
    summary = json.loads(completed.stdout)
    assert (summary["read"], summary["failed"], summary["unread"]) == (len(texts), 1, 0)
    assert _texts(_records(tmp_path / "r.jsonl")) == texts


# --- The archive command pushed as users push it (issue 59) --------------------------------------------------------
# Most of these run the driver and the command line on made-up workers, which read no image: what they test is what
# the writer, the summary and the command do with the records, not the reading.

class MadeUpWorkers:
    """Workers that read no image: each page's record is made up, a text unless `outcomes` (by file) gives an error
    or a notice, or "interrupt", which stops the run as Ctrl-C does when that page comes."""

    def __init__(self, outcomes: dict | None = None):
        self.outcomes, self.closed = outcomes or {}, False

    def read(self, tasks):
        for task in tasks:
            outcome = self.outcomes.get(task.file, {})
            if outcome == "interrupt":
                raise KeyboardInterrupt
            yield task, {"file": task.file, "page": task.page, "sha256": task.sha256, "path": task.path,
                         "text": f"the text of {task.file}", "tokens": 4, "steps": 2, "notice": None} | outcome

    def close(self):
        self.closed = True


def _pages(folder, names: list[str]):
    """Small distinct PNG files (different bytes) named `names` below `folder`."""
    for number, name in enumerate(names):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("L", (8 + number, 8), 255).save(folder / name)
    return folder


def _run(listing, path, workers, *, settings=None, **kwargs):
    """read_archive on `workers` (made up), into the results file `path`; returns (summary, how often they started)."""
    starts = []
    with ResultsFile(path, settings or {"max_new_tokens": 8}) as results:
        summary = read_archive(listing, results, lambda: starts.append(1) or workers, **{"progress": False} | kwargs)
    return summary, len(starts)


def test_an_input_reached_twice_or_copied_is_listed_once_under_its_first_name(tmp_path, capsys):
    folder = _pages(tmp_path / "arch", ["gear.png", "sub/cog.png"])
    (tmp_path / "copy.png").write_bytes((folder / "gear.png").read_bytes())  # the same bytes, another file
    (tmp_path / "link.png").symlink_to(folder / "sub" / "cog.png")
    listing = list_pages([folder, folder / "gear.png", folder.resolve() / "gear.png", folder, tmp_path / "copy.png",
                          tmp_path / "link.png"])
    assert [task.file for task in listing.pages] == ["gear.png", "sub/cog.png"]
    assert len(listing.duplicates) == 6 and listing.duplicates[0] == (f"{folder}/gear.png", "gear.png")
    assert (str(tmp_path / "copy.png"), "gear.png") in listing.duplicates
    summary, _ = _run(listing, tmp_path / "r.jsonl", MadeUpWorkers())
    assert summary.read == 2 and summary.duplicates == 6 and len(_records(tmp_path / "r.jsonl")) == 2
    told = capsys.readouterr().err.splitlines()
    assert told == [f"6 duplicate inputs skipped, each read once under its first name ({folder}/gear.png repeats "
                    "gear.png, and 5 more)"]
    assert list_pages([folder, folder]).duplicates_line() == ("2 duplicate inputs skipped, each read once under its "
                                                              "first name (gear.png given again, and 1 more)")


def test_a_file_named_as_one_read_from_another_folder_is_refused_and_a_moved_folder_resumes(tmp_path, settings):
    """`scans/2023` then `scans/2024` into one results file both name their files `a.png`: the second is refused
    instead of passing for a new version of the first; the same folder moved keeps its records."""
    older = list_pages([_pages(tmp_path / "2023", ["a.png"])])
    _run(older, tmp_path / "r.jsonl", MadeUpWorkers())
    newer = list_pages([_pages(tmp_path / "2024", ["b.png", "a.png"])])  # another a.png: other bytes
    with ResultsFile(tmp_path / "r.jsonl", {"max_new_tokens": 8}) as results:
        with pytest.raises(ValueError, match=rf"holds a.png read from {tmp_path / '2023' / 'a.png'}, and this run's "
                                             rf"a.png is {tmp_path / '2024' / 'a.png'}, another file: give the folder"):
            results.check_names(newer.pages)
        (tmp_path / "2023").rename(tmp_path / "moved")
        results.check_names(list_pages([tmp_path / "moved"]).pages)
    from utils.archive import read_inputs

    out = tmp_path / "earlier.jsonl"  # the command's path: refused before any worker starts
    out.write_text(json.dumps({"file": "a.png", "page": None, "sha256": "0" * 64, "path": "/elsewhere/a.png",
                               "text": "", "settings": settings.as_record()}) + "\n")
    with pytest.raises(ValueError, match="holds a.png read from /elsewhere/a.png"):
        read_inputs([tmp_path / "2024"], out, settings)


def test_no_worker_starts_when_no_page_is_left_to_read(tmp_path, capsys):
    listing = list_pages([_pages(tmp_path / "arch", ["a.png", "b.png"])])
    first, starts = _run(listing, tmp_path / "r.jsonl", MadeUpWorkers())
    assert (first.read, starts) == (2, 1)
    capsys.readouterr()
    again, starts = _run(listing, tmp_path / "r.jsonl", MadeUpWorkers(), progress=True)
    assert (again.read, again.earlier, starts) == (0, 2, 0)  # Ray would take seconds to start for nothing
    assert str(again).startswith("0 pages read (2 earlier), none failed; nothing left to read")
    assert capsys.readouterr().err == ""  # and no progress bar of nothing


def test_ctrl_c_closes_the_workers_and_says_how_far_the_run_came(tmp_path):
    listing = list_pages([_pages(tmp_path / "arch", ["a.png", "b.png", "c.png"])])
    workers = MadeUpWorkers({"b.png": "interrupt"})
    with pytest.raises(KeyboardInterrupt) as stopped:
        _run(listing, tmp_path / "r.jsonl", workers)
    assert workers.closed and [record["file"] for record in _records(tmp_path / "r.jsonl")] == ["a.png"]
    assert str(stopped.value) == "interrupted: 1 page read in this run, 2 left; run the same command to resume"


def test_the_summary_counts_in_words_what_happened_and_tells_each_notice(tmp_path, capsys):
    listing = list_pages([_pages(tmp_path / "arch", ["a.png", "b.png", "c.png"])])
    note = "note: this image is 9 x 8 pixels;\nexpect no real reading"
    workers = MadeUpWorkers({"a.png": {"text": "", "notice": note}, "c.png": {"error": "c.png is empty: 0 bytes"}})
    summary, _ = _run(listing, tmp_path / "r.jsonl", workers)
    assert str(summary).startswith(f"2 pages read (0 earlier), 1 failed (its record in {tmp_path / 'r.jsonl'} has an "
                                   "\"error\"), 1 page read with a notice: see its record; 8 tokens at 2.00 tokens/step")
    assert capsys.readouterr().err == "a.png: note: this image is 9 x 8 pixels; expect no real reading\n"
    assert (summary.as_dict()["notices"], summary.as_dict()["errors"], summary.complete) == (1, 1, False)
    only_failed = list_pages([_pages(tmp_path / "other", ["d.png"])])
    summary, _ = _run(only_failed, tmp_path / "d.jsonl", MadeUpWorkers({"d.png": {"error": "d.png is torn"}}))
    assert str(summary).startswith(f"0 pages read (0 earlier), 1 failed (its record in {tmp_path / 'd.jsonl'} has an "
                                   "\"error\"); ")  # not "nothing left to read": a page was tried and failed
    one = list_pages([_pages(tmp_path / "one", ["e.png"])])
    assert str(_run(one, tmp_path / "e.jsonl", MadeUpWorkers())[0]).startswith("1 page read (0 earlier), none failed")


def test_the_wall_time_counts_from_the_start_given(tmp_path):
    listing = list_pages([_pages(tmp_path / "arch", ["a.png"])])
    summary, _ = _run(listing, tmp_path / "r.jsonl", MadeUpWorkers(), started=time.perf_counter() - 100.0)
    assert summary.seconds >= 100.0 and summary.first_record_seconds >= 100.0


def test_a_changed_setting_is_refused_in_a_short_line_naming_it_old_and_new(tmp_path):
    settings = {"target": "/models/target", "precision": "f32", "prompt": "Read the page. " * 40, "max_new_tokens": 8}
    with ResultsFile(tmp_path / "r.jsonl", settings) as results:
        results.append({"file": "a.png", "page": None, "sha256": "1", "text": "A"})
    with pytest.raises(ValueError) as refused:
        ResultsFile(tmp_path / "r.jsonl", settings | {"precision": "default"})
    message = str(refused.value)
    assert message == (f"{tmp_path / 'r.jsonl'} was read with other settings: precision \"f32\" (now \"default\"); "
                       "name another --out file, or run with the same settings")
    with pytest.raises(ValueError, match=r'settings: prompt … Read the page. Read the… \(now … Read this"\), '
                                         r'max_new_tokens 8 \(now 9\);'):  # where the values differ
        ResultsFile(tmp_path / "r.jsonl", settings | {"max_new_tokens": 9, "prompt": "Read the page. Read this"})


def test_records_carry_a_utc_timestamp_and_a_model_changed_at_the_same_path_is_refused(tmp_path, shipped_ir):
    import shutil
    from datetime import datetime, timedelta

    target, draft = (shutil.copytree(folder, tmp_path / name) for folder, name in zip(shipped_ir, ("t", "d")))
    settings = ReadSettings(str(target), str(draft), device="CPU")
    record = settings.as_record()
    assert record["target_digest"] != record["draft_digest"] and len(record["target_digest"]) == 64
    with ResultsFile(tmp_path / "r.jsonl", record) as results:
        results.append({"file": "a.png", "page": None, "sha256": "1", "text": "A"})
    stamp = datetime.fromisoformat(_records(tmp_path / "r.jsonl")[0]["timestamp"].replace("Z", "+00:00"))
    assert stamp.utcoffset() == timedelta(0) and abs(datetime.now(stamp.tzinfo) - stamp) < timedelta(minutes=5)
    ResultsFile(tmp_path / "r.jsonl", settings.as_record()).close()  # the same models: accepted
    with open(target / "config.json", "a") as file:
        file.write(" ")  # another model at the same path, however small the change
    with pytest.raises(ValueError, match=r"other settings: target_digest \"[0-9a-f]{23}… \(now \"[0-9a-f]{23}…\);"):
        ResultsFile(tmp_path / "r.jsonl", settings.as_record())


def test_a_results_file_written_before_records_carried_digests_is_resumed(tmp_path):
    old_settings = {"target": "/models/target", "draft": None, "precision": "f32"}
    (tmp_path / "r.jsonl").write_text(json.dumps({"file": "a.png", "page": None, "sha256": "1", "text": "A",
                                                  "settings": old_settings}) + "\n")
    new_settings = old_settings | {"target_digest": "ab" * 32, "draft_digest": None}
    with ResultsFile(tmp_path / "r.jsonl", new_settings) as results:  # taken as read by the models now at the paths
        assert results.done() == {("a.png", None, "1")}
    with pytest.raises(ValueError, match="precision"):  # the settings it has are still checked
        ResultsFile(tmp_path / "r.jsonl", new_settings | {"precision": "default"})


def test_a_zero_byte_file_is_said_to_be_empty(tmp_path):
    from utils.archive.reader import page_image

    (tmp_path / "blank.png").write_bytes(b"")
    task = list_pages([tmp_path]).pages[0]
    with pytest.raises(ValueError, match=r"^blank.png is empty: 0 bytes$"):
        page_image(task)


def test_a_page_of_another_shape_is_read_with_its_notice_told_and_counted(tmp_path, settings, capsys):
    Image.new("RGB", (64, 32), "white").save(tmp_path / "small.png")
    summary, _ = _run(list_pages([tmp_path]), tmp_path / "r.jsonl", LocalWorker(settings),
                      settings=settings.as_record())
    record = _records(tmp_path / "r.jsonl")[0]
    assert record["notice"].startswith("note: this image is 64 x 32 pixels") and summary.notices == 1
    assert capsys.readouterr().err == f"small.png: {record['notice']}\n"


def _main(argv, capsys) -> tuple[int, str, str]:
    from utils.ocr import main

    code = main(list(map(str, argv)))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def made_up_command(tmp_path, monkeypatch):
    """`python -m utils.ocr` in this process on made-up workers, with model folders it never reads, a clock that the
    export moves on by 60 s, started 5 s before main; returns the outcomes the workers give, to fill in."""
    from utils import ocr
    from utils.archive import run

    clock, outcomes = [1000.0], {}
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])

    def export():
        clock[0] += 60.0
        return str(_pages(tmp_path / "target", ["model.png"])), None

    monkeypatch.setattr(ocr, "_model_folders", lambda args: export())
    monkeypatch.setattr(ocr, "process_seconds", lambda: 5.0)  # Python's start and imports before main
    monkeypatch.setattr(run, "worker_starter", lambda settings, **_: lambda: MadeUpWorkers(outcomes))
    monkeypatch.setenv("DSPARK_OCR_MODELS", str(tmp_path / "models"))
    return outcomes


def test_the_command_s_wall_time_counts_the_export_before_the_reading(tmp_path, made_up_command, capsys):
    code, out, _ = _main([_pages(tmp_path / "arch", ["a.png"]), "--out", tmp_path / "r.jsonl", "--json"], capsys)
    assert code == 0 and json.loads(out)["seconds"] == 65.0  # the process's start, then the export: nothing else


def test_ctrl_c_on_the_command_is_one_line_and_exit_130(tmp_path, made_up_command, capsys):
    made_up_command["b.png"] = "interrupt"
    code, _, err = _main([_pages(tmp_path / "arch", ["a.png", "b.png"]), "--out", tmp_path / "r.jsonl", "--quiet"],
                         capsys)
    assert code == 130 and err == "interrupted: 1 page read in this run, 1 left; run the same command to resume\n"


def test_ctrl_c_before_the_first_page_is_one_line_and_exit_130(tmp_path, made_up_command, capsys, monkeypatch):
    from utils import ocr

    def interrupted_export(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(ocr, "_model_folders", interrupted_export)
    code, _, err = _main([_pages(tmp_path / "arch", ["a.png"]), "--out", tmp_path / "r.jsonl"], capsys)
    assert code == 130 and err == "interrupted before any page was read; run the same command to resume\n"


def test_more_workers_than_cores_is_a_one_line_warning(tmp_path, made_up_command, capsys, monkeypatch):
    from utils.archive import workers

    monkeypatch.setattr(workers, "available_cores", lambda: 2)
    arguments = [_pages(tmp_path / "arch", ["a.png"]), "--out", tmp_path / "r.jsonl", "--quiet"]
    code, _, err = _main([*arguments, "--workers", "5"], capsys)
    assert code == 0 and err.splitlines()[0] == ("warning: 5 workers on 2 cores: each gets 1 thread and they share "
                                                 "the cores, slower than 2 workers")
    assert "warning" not in _main([*arguments, "--workers", "2"], capsys)[2]


def test_ray_with_one_actor_says_how_to_start_more(tmp_path, made_up_command, capsys):
    arguments = [_pages(tmp_path / "arch", ["a.png"]), "--out", tmp_path / "r.jsonl", "--quiet", "--ray"]
    code, _, err = _main(arguments, capsys)
    assert code == 0 and err.splitlines()[0].startswith("reading on one Ray actor: --workers N starts N")
    assert "one Ray actor" not in _main([*arguments, "--workers", "2"], capsys)[2]


def test_a_ray_address_where_no_cluster_listens_is_refused_before_any_worker_starts(settings, monkeypatch):
    from utils.archive import worker_starter

    with pytest.raises(ValueError, match=r"^no Ray cluster answers at 127.0.0.1:1 \(Connection refused\)"):
        worker_starter(settings, workers=2, ray="127.0.0.1:1")  # read_inputs calls it before it opens the results
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    with pytest.raises(ValueError, match=r"^no Ray cluster answers at \$RAY_ADDRESS=127.0.0.1:1 "):
        worker_starter(settings, workers=2, ray="")


@pytest.mark.parametrize("answer, accepted", [(None, False), (b"HTTP/1.1 400 Bad Request\r\n\r\n", False),
                                              (bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]), True)])
def test_a_ray_address_is_refused_in_seconds_where_something_listens_that_is_not_ray(answer, accepted, monkeypatch):
    """A port that accepts and says nothing, or answers as HTTP/1, is not a Ray cluster (Ray would retry for
    minutes); one that answers an HTTP/2 preface with a SETTINGS frame, as Ray's gRPC servers do, passes."""
    import socket
    import threading

    from utils.archive import ray_workers

    monkeypatch.setattr(ray_workers, "CONNECT_SECONDS", 0.5)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve():
        connection, _ = server.accept()
        with connection:
            connection.recv(64)
            if answer:
                connection.sendall(answer)
            time.sleep(1.0)

    threading.Thread(target=serve, daemon=True).start()
    try:
        if accepted:
            ray_workers.check_ray_address(f"127.0.0.1:{port}")
        else:
            with pytest.raises(ValueError, match=rf"^no Ray cluster answers at 127.0.0.1:{port}: something listens "
                                                 "there, but not Ray"):
                ray_workers.check_ray_address(f"127.0.0.1:{port}")
    finally:
        server.close()


def _latest_records() -> list[dict]:
    """A results file's records as runs leave them: pages read again, a changed file, a failed page, nested names,
    a reading padded with spaces and blank rows."""
    def record(file, page, sha256, text=None, error=None):
        return {"file": file, "page": page, "sha256": sha256} | ({"error": error} if error else {"text": text})

    return [record("letters/bundle.pdf", 1, "p", "Dear Ann,\n"), record("letters/bundle.pdf", 2, "p", error="torn"),
            record("letters/bundle.pdf", 3, "p", "first reading"), record("scans/a.png", None, "old", "old text"),
            record("letters/bundle.pdf", 3, "p", "yours, Bob"), record("scans/a.png", None, "new", "new text  \n  kept indent \n     \n   "),
            record("/abs/b.png", None, "b", "B"), record("../up.png", None, "u", "U"),
            record("gaps.pdf", 1, "g", "one"), record("gaps.pdf", 3, "g", "three"),
            record("locked.pdf", None, "l", error="locked.pdf is encrypted")]


def test_the_text_export_writes_each_document_from_the_latest_record_of_each_page_in_order(tmp_path):
    from utils.archive.texts import export_texts

    exported = export_texts(_latest_records(), tmp_path / "texts")
    written = {path.relative_to(tmp_path / "texts").as_posix(): path.read_text(encoding="utf-8")
               for path in (tmp_path / "texts").rglob("*") if path.is_file()}
    assert written == {"letters/bundle.pdf.txt": "Dear Ann,\n\f[page 2 failed: torn]\n\fyours, Bob\n",
                       "scans/a.png.txt": "new text\n  kept indent\n", "abs/b.png.txt": "B\n", "__/up.png.txt": "U\n",
                       "gaps.pdf.txt": "one\n\f[page 2: not read]\n\fthree\n",
                       "locked.pdf.txt": "[failed: locked.pdf is encrypted]\n"}
    assert str(exported) == f"6 text files written to {tmp_path / 'texts'} (9 pages, 2 failed)"


def test_a_text_file_is_replaced_whole_or_left_as_it_was(tmp_path):
    from utils.files import atomic_write_text

    atomic_write_text(tmp_path / "a.txt", "old")
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(tmp_path / "a.txt", "half \ud800 written")  # fails in the middle of writing
    assert [path.name for path in tmp_path.iterdir()] == ["a.txt"] and (tmp_path / "a.txt").read_text() == "old"


def test_the_command_exports_the_texts_of_a_results_file(tmp_path, capsys):
    with ResultsFile(tmp_path / "r.jsonl", {"max_new_tokens": 8}) as results:
        for record in _latest_records():
            results.append(record)
    code, _, err = _main(["--out", tmp_path / "r.jsonl", "--export-text", tmp_path / "texts"], capsys)
    assert code == 0 and err == f"6 text files written to {tmp_path / 'texts'} (9 pages, 2 failed)\n"
    assert (tmp_path / "texts" / "scans" / "a.png.txt").read_text() == "new text\n  kept indent\n"
