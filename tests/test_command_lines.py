"""Every command line fails early and clearly: bad paths and values are one line and exit code 2, before
anything is exported or compiled; usage names the command as it is run, --help shows every default, and a
JSON results file is always `--json FILE`."""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import time
from unittest import mock

import pytest
from PIL import Image

from pdfs import broken_pdf, encrypted_pdf, pdf_of_images, pdf_without_pages
from utils.cli import CommandParser
from utils.models import REPO_ROOT

COMMANDS = ["utils.ocr", "utils.bench", "utils.export.__main__", "utils.tiny.__main__",
            "benchmarks.archive_throughput", "benchmarks.chunked_prefill", "benchmarks.confidence_reach", "benchmarks.cpu_speedup",
            "benchmarks.draft_study", "benchmarks.engine_efficiency", "benchmarks.fc_kernels", "benchmarks.hard_pages",
            "benchmarks.mechanisms",
            "benchmarks.language_model_latency", "benchmarks.margins", "benchmarks.reader_study",
            "benchmarks.real_size_dry_run", "benchmarks.seed_validation"]
METAVARS = {"N", "X", "P", "MS", "DIR", "FILE", "RANGE", "TEXT", "JSON", "DEVICE", "ADDRESS"}


@pytest.fixture
def page(tmp_path):
    Image.new("RGB", (64, 32), "white").save(tmp_path / "page.png")
    return tmp_path / "page.png"


@pytest.fixture
def empty_models(tmp_path, monkeypatch):
    """An empty models folder: a command that exported the tiny pair before failing would fill it."""
    folder = tmp_path / "models"
    folder.mkdir()
    monkeypatch.setenv("DSPARK_OCR_MODELS", str(folder))
    yield folder
    assert not any(folder.iterdir()), "the command exported before it checked its input"


def _run_module(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, cwd=REPO_ROOT,
                          env=os.environ | {"PYTHONPATH": str(REPO_ROOT)}, timeout=120)


@pytest.mark.parametrize("arguments, message", [
    (["missing.png"], "python -m utils.ocr: error: argument FILE: missing.png does not exist"),
    (["{page}", "--target", "nope"], "python -m utils.ocr: error: argument --target: nope does not exist"),
    (["{page}", "--max-new-tokens", "-5"], "argument --max-new-tokens: -5 is out of range: it must be at least 1"),
    (["{page}", "--confidence-threshold", "7"],
     "argument --confidence-threshold: 7 is out of range: it must be between 0 and 1"),
])
def test_ocr_rejects_the_newcomers_bad_inputs_in_one_line_before_exporting(empty_models, page, arguments, message):
    completed = _run_module("utils.ocr", *[argument.format(page=page) for argument in arguments])
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.splitlines() == [completed.stderr.strip()], completed.stderr  # one line
    assert message in completed.stderr and completed.stdout == ""  # and `empty_models` stays empty: no export


def _exit(main, argv: list[str], capsys) -> tuple[int, str]:
    """(exit code, stderr) of a command's main, whether it returns the code or exits with it."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


def _pdfs(folder) -> dict:
    (folder / "zero-bytes.pdf").write_bytes(b"")
    return {"encrypted": (encrypted_pdf(folder / "encrypted.pdf"), "is encrypted"),
            "broken": (broken_pdf(folder / "broken.pdf"), "is not a readable PDF"),
            "no pages": (pdf_without_pages(folder / "no-pages.pdf"), "is not a readable PDF"),
            "zero bytes": (folder / "zero-bytes.pdf", "is empty: 0 bytes")}


@pytest.mark.parametrize("kind", ["encrypted", "broken", "no pages", "zero bytes"])
def test_ocr_refuses_a_pdf_it_cannot_read_in_one_line(empty_models, tmp_path, capsys, kind):
    from utils.ocr import main

    path, message = _pdfs(tmp_path)[kind]
    code, stderr = _exit(main, [str(path)], capsys)
    assert code == 2 and stderr.count("\n") == 1 and message in stderr, stderr
    assert stderr.startswith(f"python -m utils.ocr: error: {path}")


@pytest.mark.parametrize("arguments, message", [
    (["--pages", "2-3"], "pages 2-3 are out of range: {pdf} has 2 pages"),
    (["--pages", "3-1"], "argument --pages: 3-1 is not a range of pages"),
    (["--pages", "0"], "argument --pages: 0 is not a range of pages"),
    (["--pages", "one"], "argument --pages: 'one' is not a page or a range of pages"),
])
def test_ocr_checks_the_page_range_against_the_pdf(empty_models, tmp_path, capsys, arguments, message):
    from utils.ocr import main

    pdf = pdf_of_images([Image.new("RGB", (60, 40), "white")] * 2, tmp_path / "two.pdf")
    code, stderr = _exit(main, [str(pdf), *arguments], capsys)
    assert code == 2 and stderr.count("\n") == 1 and message.format(pdf=pdf) in stderr, stderr


def test_ocr_checks_the_step_cost_before_exporting_anything(empty_models, page, capsys):
    from utils.ocr import main

    code, stderr = _exit(main, [str(page), "--step-cost", "0", "4"], capsys)
    assert code == 2 and stderr.count("\n") == 1 and "a step cost needs fixed_ms > 0" in stderr, stderr


def test_ocr_pages_of_an_image_is_a_mistake(empty_models, page, capsys):
    from utils.ocr import main

    code, stderr = _exit(main, [str(page), "--pages", "1"], capsys)
    assert code == 2 and f"--pages reads pages of a PDF, and {page} is not one" in stderr


@pytest.mark.parametrize("module, arguments, message", [
    ("utils.bench", ["--pages", "0"], "argument --pages: 0 is out of range"),
    ("utils.bench", ["--pages", "999"], "argument --pages: 999 is out of range: there are"),
    ("utils.bench", ["--target", "nope"], "argument --target: nope does not exist"),
    ("utils.bench", ["--json", "no/such/folder/results.json"], "(no/such/folder) does not exist"),
    ("utils.bench", ["--confidence-threshold", "-0.1"], "must be between 0 and 1"),
    ("utils.export.__main__", ["draft", "--model", "nope", "--out", "x"], "argument --model: nope does not exist"),
    ("utils.export.__main__", ["target", "--model", ".", "--out", "x", "--prefill-chunk", "0"], "at least 1"),
    ("utils.tiny.__main__", ["--out", "x", "--block-size", "0"], "argument --block-size: 0 is out of range"),
    ("benchmarks.archive_throughput", ["--pages", "1"], "argument --pages: 1 is out of range"),
    ("benchmarks.chunked_prefill", ["--calls", "0"], "argument --calls: 0 is out of range"),
    ("benchmarks.chunked_prefill", ["--longest-call", "0"], "argument --longest-call: 0 is out of range"),
    ("benchmarks.confidence_reach", ["--loss", "1.5"], "argument --loss: 1.5 is out of range"),
    ("benchmarks.cpu_speedup", ["--thresholds", "0.5", "2"], "argument --thresholds: 2 is out of range"),
    ("benchmarks.cpu_speedup", ["--precisions", "bf16"], "argument --precisions: invalid choice: 'bf16'"),
    ("benchmarks.cpu_speedup", ["--input-scale", "0"], "argument --input-scale: 0 is out of range"),
    ("benchmarks.draft_study", ["--pages", "0"], "argument --pages: 0 is out of range"),
    ("benchmarks.draft_study", ["--pair", "nope"], "argument --pair: nope does not exist"),
    ("benchmarks.engine_efficiency", ["--taus", "0.5"], "argument --taus: 0.5 is out of range"),
    ("benchmarks.margins", ["--input-scales", "0.5"], "argument --input-scales: 0.5 is out of range"),
    ("benchmarks.language_model_latency", ["--repeats", "0"], "argument --repeats: 0 is out of range"),
    ("benchmarks.fc_kernels", ["--repeats", "0"], "argument --repeats: 0 is out of range"),
    ("benchmarks.reader_study", ["--steps", "zero"], "argument --steps: 'zero' is not an integer"),
    ("benchmarks.reader_study", ["--partial-rotary-factor", "2"], "argument --partial-rotary-factor: 2 is out"),
    ("benchmarks.reader_study", ["--hidden-size", "18"], "hidden_size=18 must be a multiple of 4"),
    ("benchmarks.real_size_dry_run", ["--new-tokens", "1"], "it must be at least 2"),
    ("benchmarks.seed_validation", ["--max-new-tokens", "0"], "argument --max-new-tokens: 0 is out of range"),
])
def test_every_command_rejects_bad_values_in_one_line(empty_models, capsys, module, arguments, message):
    code, stderr = _exit(importlib.import_module(module).main, arguments, capsys)
    prog = "python -m " + module.removesuffix(".__main__")
    assert code == 2 and stderr.count("\n") == 1 and stderr.startswith(prog) and message in stderr, stderr


class _Parsed(Exception):
    pass


def _parser_of(module: str) -> argparse.ArgumentParser:
    """The parser a command's main builds (caught at parse_args, so nothing runs)."""
    seen = []

    def capture(self, *_args, **_kwargs):
        seen.append(self)
        raise _Parsed

    with mock.patch.object(CommandParser, "parse_args", capture), pytest.raises(_Parsed):
        importlib.import_module(module).main([])
    return seen[0]


def _options(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                yield from _options(subparser)
        elif not isinstance(action, argparse._HelpAction) and action.help != argparse.SUPPRESS:
            yield parser, action


@pytest.mark.parametrize("module", COMMANDS)
def test_every_command_names_itself_documents_every_option_and_shows_defaults(module):
    parser = _parser_of(module)
    assert parser.prog == "python -m " + module.removesuffix(".__main__")
    for owner, action in _options(parser):
        name = "/".join(action.option_strings) or action.dest
        assert action.help, f"{owner.prog} {name} has no help"
        if action.nargs != 0 and action.choices is None:  # takes a value that is not one of a few names
            assert action.metavar in METAVARS, f"{owner.prog} {name}: metavar {action.metavar}"
        if action.option_strings and action.default is not None and action.default is not False:
            assert "(default" in owner._get_formatter()._get_help_string(action), f"{owner.prog} {name}"
        archive_results = module == "utils.ocr" and action.metavar == "FILE"  # an archive's JSON Lines, appended to
        assert action.dest != "out" or action.metavar == "DIR" or archive_results, \
            f"{owner.prog}: --out names a folder, JSON is --json"
        assert action.dest != "json" or action.metavar == "FILE"


def test_help_shows_the_defaults():
    text = " ".join(_parser_of("utils.ocr").format_help().split())
    assert "--max-new-tokens N the most tokens to write per page (default: 512)" in text
    assert "(default: 0.5)" in text and "--json [FILE]" in text


def test_ocr_says_an_empty_image_file_is_empty(empty_models, tmp_path, capsys):
    from utils.ocr import main

    (tmp_path / "blank.png").write_bytes(b"")
    code, stderr = _exit(main, [str(tmp_path / "blank.png")], capsys)
    assert code == 2 and stderr == f"python -m utils.ocr: error: {tmp_path / 'blank.png'} is empty: 0 bytes\n"


def test_ocr_refuses_a_ray_address_where_no_cluster_listens_at_once_in_one_line(empty_models, page, tmp_path):
    completed = _run_module("utils.ocr", str(page), "--out", str(tmp_path / "r.jsonl"), "--ray", "127.0.0.1:1")
    assert completed.returncode == 2, completed.stderr  # within _run_module's timeout, where Ray retried for minutes
    assert completed.stderr.startswith("python -m utils.ocr: error: no Ray cluster answers at 127.0.0.1:1 ")
    assert completed.stderr.count("\n") == 1 and not (tmp_path / "r.jsonl").exists()  # and nothing exported


@pytest.mark.parametrize("arguments, message", [
    ([], "the following arguments are required: FILE"),
    (["--export-text", "texts"], "--export-text needs --out RESULTS.jsonl"),
    (["--out", "missing.jsonl", "--export-text", "texts"], "missing.jsonl does not exist: no results file to read"),
])
def test_ocr_text_export_needs_a_results_file(empty_models, capsys, arguments, message):
    from utils.ocr import main

    code, stderr = _exit(main, arguments, capsys)
    assert code == 2 and stderr.count("\n") == 1 and message in stderr, stderr


def test_a_command_s_wall_time_counts_from_the_process_s_start():
    started = time.perf_counter()
    probe = "import time; time.sleep(0.5); from utils.cli import process_seconds; print(process_seconds())"
    seconds = float(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO_ROOT,
                                   env=os.environ | {"PYTHONPATH": str(REPO_ROOT)}, timeout=60).stdout)
    assert 0.5 <= seconds <= time.perf_counter() - started  # its sleep and start, within what the caller waited
