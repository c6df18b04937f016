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

from pdfs import broken_pdf, encrypted_pdf
from utils.archive import PageReader, ReadSettings, ResultsFile, list_pages, read_archive
from utils.archive.workers import LocalWorker, ProcessWorkers
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
    assert path.read_text().endswith('"error": "b.png is not an image", "settings": {"max_new_tokens": 8}}\n')
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
    (folder / "scans" / "page-03.png").write_bytes((folder / "scans" / "page-01.png").read_bytes())
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
    assert [record["file"] for record in _records(tmp_path / "r.jsonl")] == []  # no page recorded as read


@pytest.mark.slow
def test_the_command_line_reads_on_a_local_ray_it_starts_and_stops(archive, tmp_path):
    folder, texts = archive
    completed = _ocr(str(folder), "--out", str(tmp_path / "r.jsonl"), "--precision", "f32", "--draft-precision",
                     "f32", "--device", "CPU", "--ray", "--workers", "2", "--json")
    assert completed.returncode == 1, completed.stderr  # the broken file
    summary = json.loads(completed.stdout)
    assert (summary["read"], summary["failed"], summary["unread"]) == (len(texts), 1, 0)
    assert _texts(_records(tmp_path / "r.jsonl")) == texts
