"""The real-size dry run, end to end at its small scale: build, export and run in child processes, one table.

No timing is asserted (the shared CPU decides it): only that every column is there and every number is one a
run can produce.
"""

from __future__ import annotations

import contextlib
import io

import pytest

from benchmarks.real_size_dry_run import COLUMNS, FULL_PAGE_SIZE, full_page, main

pytestmark = pytest.mark.slow  # builds, exports and runs models in child processes

NEW_TOKENS = 8
CONTEXT = 160
MODES = ("4x", "16x")
STEPS = ["export draft"] + [step for mode in MODES for step in (
    f"export target ({mode})", f"pipeline, target only ({mode})", f"pipeline, speculative (random draft) ({mode})")]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """(tables, printed output, work folder) of one small-scale run of one format in both image modes."""
    work = tmp_path_factory.mktemp("dry-run")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        tables = main(["--scale", "small", "--formats", "int8", "--context", str(CONTEXT),
                       "--new-tokens", str(NEW_TOKENS), "--work", str(work), "--modes", *MODES])
    return tables, printed.getvalue(), work


def test_the_table_has_every_column_and_a_row_per_step(dry_run):
    tables, out, _ = dry_run
    assert list(tables) == ["int8"]
    lines = out[out.index("### int8 weights"):].splitlines()
    header, rows = lines[2], lines[4:4 + len(STEPS)]
    assert [cell.strip() for cell in header.strip("|").split("|")] == list(COLUMNS)
    assert [row.strip("|").split("|")[0].strip() for row in rows] == STEPS
    assert all(len(row.strip("|").split("|")) == len(COLUMNS) for row in rows)
    assert "acceptance here is meaningless" in out.lower()


def _rows(tables, prefix: str) -> list[dict]:
    return [row for row in tables["int8"] if row["step"].startswith(prefix)]


def test_exports_report_their_folder_size_and_memory(dry_run):
    tables, _, _ = dry_run
    for row in _rows(tables, "export"):
        assert row["disk_bytes"] > 0
        assert row["peak_rss_bytes"] > row["disk_bytes"]  # the exporter holds at least the weights it writes
        assert row["seconds"] > 0


def test_pipeline_runs_generate_the_budget_from_a_prompt_of_the_context(dry_run):
    tables, _, _ = dry_run
    runs = _rows(tables, "pipeline")
    assert len(runs) == 2 * len(MODES)
    for target_only, speculative in zip(runs[::2], runs[1::2]):
        _assert_runs(target_only, speculative)


def _assert_runs(target_only: dict, speculative: dict) -> None:
    for row in (target_only, speculative):
        assert row["tokens"] == NEW_TOKENS  # no EOS stop
        assert 0 < row["image_tokens"] < row["context_tokens"]
        assert abs(row["context_tokens"] - CONTEXT) <= CONTEXT // 10  # the filler's retokenisation may shift it
        assert row["ttft"] > 0 and row["decode_tokens_per_s"] > 0 and row["peak_rss_bytes"] > 0
        assert 0 < row["vision_seconds"] + row["prefill_seconds"] <= row["ttft"]  # parts of the time to first token
    assert target_only["tokens_per_step"] == 1.0
    assert 1.0 <= speculative["tokens_per_step"] <= 16.0
    assert target_only["context_tokens"] == speculative["context_tokens"]  # the same page and prompt


def test_the_full_page_is_sliced_and_4x_reads_it_with_about_four_times_the_image_tokens_of_16x(tiny_pair):
    """The default page of the dry run at the recipe's slicing (448 px slices of 16 px patches, up to 9): tiles of
    2 x 2 patches per token against 4 x 4, give or take the rounding of tile sides to each mode's merge step."""
    import dataclasses

    from utils.pipeline.preprocessing import ImagePreprocessor

    page = full_page()
    assert page.size == FULL_PAGE_SIZE
    preprocess = ImagePreprocessor.from_pretrained(tiny_pair.target)
    read = {mode: ImagePreprocessor(dataclasses.replace(preprocess.config, downsample_mode=mode, max_slice_nums=9,
                                                        scale_resolution=448, patch_size=16), tokens=preprocess.tokens)(page)
            for mode in MODES}
    assert all(6 <= rows * cols <= 9 for rows, cols in (inputs.grid for inputs in read.values()))
    assert 3 * read["16x"].num_image_tokens < read["4x"].num_image_tokens < 5 * read["16x"].num_image_tokens


def test_the_work_folder_is_removed_without_keep(dry_run):
    _, _, work = dry_run
    assert list(work.iterdir()) == []


def test_new_tokens_below_two_is_refused():
    with pytest.raises(SystemExit):
        main(["--scale", "small", "--new-tokens", "1"])
