"""The seed's validation: page choice, the side-by-side table, and the offline stand-in (nothing is downloaded)."""

from __future__ import annotations

import pytest

import benchmarks.seed_validation as seed_validation
from utils.pages.omnidocbench import SEED_PAGE, pages_per_category
from utils.pages.reading_pages import sample_pages
from utils.evaluation.seed_figures import SEED_ROWS, seed_comparison


def _page(category: str, name: str) -> dict:
    return {"page_info": {"image_path": name, "page_attribute": {"data_source": category}}, "layout_dets": []}


def test_one_page_per_category_in_sorted_order_with_the_seed_page_first_choice():
    annotations = [_page("newspaper", "b.jpg"), _page("academic_literature", "zz.jpg"), _page("newspaper", "a.jpg"),
                   _page("academic_literature", SEED_PAGE), _page("book", "c.png")]
    assert pages_per_category(annotations) == [("academic_literature", SEED_PAGE), ("book", "c.png"),
                                               ("newspaper", "a.jpg")]
    many = [_page(f"category-{index}", f"{index}.jpg") for index in range(9, -1, -1)]
    assert [category for category, _ in pages_per_category(many)] == [f"category-{index}" for index in range(8)]
    with pytest.raises(ValueError, match="page 1 has no page_info.image_path"):
        pages_per_category([_page("book", "c.png"), {"page_info": {"image_path": "x.jpg"}}])


def _config(draft, top_k, tokens_per_s, speedup, tokens_per_step):
    return {"draft": draft, "markov_head_top_k": top_k, "decode_tokens_per_s": tokens_per_s, "speedup": speedup,
            "mean_tokens_per_step": tokens_per_step}


def test_the_table_puts_the_seed_row_of_the_same_weights_and_walk_beside_ours():
    results = {"configurations": [_config(None, None, 10.0, 1.0, 1.0), _config("/m/draft-fp16", None, 20.0, 2.0, 4.5),
                                  _config("/m/draft-int4", None, 21.0, 2.1, 4.4), _config("/m/draft-fp16", 0, 11.0, 1.1, 4.5),
                                  _config("/m/other", None, 12.0, 1.2, 3.0)]}
    table = seed_comparison(results, {"/m/draft-fp16": "bf16", "/m/draft-int4": "int4"})
    rows = table.splitlines()
    assert all(row.count("|") == rows[0].count("|") for row in rows)  # every row has every column
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]
    seed = {(row.weights, row.top_k): row for row in SEED_ROWS}
    assert cells[0][2:4] == ["10.0", "1.00x"] and cells[0][6] == f"{seed[None, None].tokens_per_s:.1f}"
    assert cells[1][:5] == ["draft-fp16", "Top-K scorer", "20.0", "2.00x", "4.50"]
    assert cells[1][5:] == ["bf16", "201.8", "2.23x", "5.47"]
    assert cells[2][5:] == ["int4", "202.7", "2.24x", "5.30"]
    assert cells[3][1] == "dense walk" and cells[3][5:] == ["bf16", "98.2", "1.08x", "4.83"]
    assert cells[4][5:] == ["", "", "", ""]  # the seed did not measure it


def test_the_hub_check_gives_one_line_or_none(monkeypatch):
    import huggingface_hub

    from utils.models import hub_unreachable_reason

    def unreachable(self, repo_id, timeout):
        raise ConnectionError("Name or service not known\nsecond line")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", unreachable)
    reason = hub_unreachable_reason()
    assert "\n" not in reason and "ConnectionError: Name or service not known" in reason
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, repo_id, timeout: object())
    assert hub_unreachable_reason() is None


def test_offline_the_tiny_pair_and_sample_pages_stand_in(monkeypatch, tiny_ir):
    import utils.models

    def no_download(*args, **kwargs):
        raise AssertionError("nothing may be downloaded offline")

    monkeypatch.setattr(utils.models, "hub_unreachable_reason", lambda: "the model hub does not answer (test)")
    monkeypatch.setattr(utils.models, "real_ir_pair", no_download)
    monkeypatch.setattr(seed_validation, "_tiny_pair", lambda models: (tiny_ir[0], {"fp32": tiny_ir[1]}))
    run = seed_validation.seed_run()
    assert run.note == "offline: the model hub does not answer (test); the tiny pair and the sample pages stand in"
    assert [page.name for page in run.pages] == [page.name for page in sample_pages()[:8]]
    assert run.num_assistant_tokens is None  # the tiny draft's block size, not the seed's 15

    monkeypatch.setattr(seed_validation, "seed_run",
                        lambda models, pages_dir: seed_validation.SeedRun(**{**run.__dict__, "pages": run.pages[:2]}))
    report, results = seed_validation.run_seed_validation(device="CPU", precision="f32", max_new_tokens=12)
    assert report.splitlines()[0] == run.note
    assert [config["name"] for config in results["configurations"]] == [
        "target only", f"{tiny_ir[1].name}, Top-K scorer", f"{tiny_ir[1].name}, dense walk"]
    assert results["output_mismatches"] == [] and results["confidence_threshold"] == 0.0
    assert "| draft | Top-K scorer |" in report and "| bf16 | 201.8 | 2.23x | 5.47 |" in report
