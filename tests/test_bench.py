"""The benchmark's arithmetic on synthetic step records, and the schema of its results on the tiny pair."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from utils.bench import main
from utils.engine.verification import StepRecord
from utils.evaluation.acceptance import (conditional_acceptance, confidence_auc, reliability_bins, replay_threshold,
                                         scored_positions, tokens_per_step_histogram)
from utils.evaluation.benchmark import (THRESHOLD_SWEEP, BenchConfig, markdown_report, run_benchmark, summarize,
                                        threshold_sweep_times)

PREFILL = StepRecord(drafted=(), emitted=(7,))
STEPS = [  # four drafting steps of 3 drafts: accepted 0, 3, 1, 2
    PREFILL,
    StepRecord(drafted=(1, 2, 3), emitted=(9,), confidences=(0.2, 0.1, 0.1)),
    StepRecord(drafted=(1, 2, 3), emitted=(1, 2, 3, 4), confidences=(0.9, 0.8, 0.7)),
    StepRecord(drafted=(5, 6, 7), emitted=(5, 8), confidences=(0.6, 0.3, 0.9)),
    StepRecord(drafted=(5, 6, 7), emitted=(5, 6, 0), confidences=(0.7, 0.6, 0.4)),
]


def test_tokens_per_step_histogram_counts_drafting_steps():
    assert tokens_per_step_histogram(STEPS) == [0, 1, 1, 1, 1]
    assert tokens_per_step_histogram(STEPS, max_tokens=6) == [0, 1, 1, 1, 1, 0, 0]


def test_conditional_acceptance_by_position():
    rows = conditional_acceptance(STEPS)
    assert [(r["reached"], r["accepted"]) for r in rows] == [(4, 3), (3, 2), (2, 1)]
    assert [r["rate"] for r in rows] == [0.75, 2 / 3, 0.5]


def test_positions_after_an_eos_cut_are_not_counted_as_rejected():
    cut = StepRecord(drafted=(4, 2, 5), emitted=(4, 2))  # EOS = 2 ended the answer while the drafts matched
    rows = conditional_acceptance([PREFILL, cut])
    assert [(r["reached"], r["accepted"]) for r in rows] == [(1, 1), (1, 1)]  # position 3 was never checked


def test_scored_positions_stop_at_the_first_rejection():
    scores, accepted = scored_positions(STEPS)
    assert scores == [0.2, 0.9, 0.8, 0.7, 0.6, 0.3, 0.7, 0.6, 0.4]
    assert accepted == [False, True, True, True, True, False, True, True, False]


def test_scored_positions_score_the_first_cut_draft_when_the_target_wrote_its_position():
    kept_and_right = StepRecord(drafted=(1, 2), emitted=(1, 2, 3), confidences=(0.9, 0.8), cut=(3, 4),
                                cut_confidences=(0.4, 0.3))  # the target's third token is the cut draft 3
    kept_and_wrong = StepRecord(drafted=(), emitted=(6,), confidences=(), cut=(5, 6), cut_confidences=(0.2, 0.9))
    rejected_first = StepRecord(drafted=(1, 2), emitted=(1, 7), confidences=(0.9, 0.8), cut=(3,),
                                cut_confidences=(0.4,))  # draft 2 was rejected: the cut one was never reached
    ended = StepRecord(drafted=(4, 2), emitted=(4, 2), confidences=(0.9, 0.8), cut=(5,), cut_confidences=(0.4,))
    scores, accepted = scored_positions([kept_and_right, kept_and_wrong, rejected_first, ended])
    assert scores == [0.9, 0.8, 0.4, 0.2, 0.9, 0.8, 0.9, 0.8]
    assert accepted == [True, True, True, False, True, False, True, True]


def test_a_replayed_threshold_verifies_the_confident_prefix_and_loses_the_accepted_drafts_after_it():
    replay = replay_threshold(STEPS, 0.65)  # confident prefixes: 0, 3, 0, 1 drafts
    assert (replay["drafts verified"], replay["drafts verified at threshold"]) == (12, 4)
    assert (replay["accepted drafts"], replay["accepted drafts at threshold"]) == (6, 4)
    assert replay["accepted drafts lost"] == 2 and replay["steps"] == 4
    assert replay_threshold(STEPS, 0.0)["accepted drafts lost"] == 0


def test_confidence_auc_and_reliability():
    scores, accepted = [0.9, 0.8, 0.8, 0.1, 0.5], [True, True, False, False, True]
    pairs = [(p > n) + 0.5 * (p == n) for p, a in zip(scores, accepted) if a
             for n, b in zip(scores, accepted) if not b]  # every (accepted, rejected) pair, a tie counting half
    assert confidence_auc(scores, accepted) == pytest.approx(sum(pairs) / len(pairs)) == 0.75
    assert confidence_auc([0.9, 0.8, 0.1], [True, True, False]) == 1.0
    assert math.isnan(confidence_auc([0.5], [True]))
    bins = reliability_bins([0.05, 0.15, 0.95, 0.99], [False, True, True, True], bins=10)
    assert [b["count"] for b in bins] == [1, 1, 0, 0, 0, 0, 0, 0, 0, 2]
    assert bins[9]["predicted"] == pytest.approx(0.97) and bins[9]["observed"] == 1.0
    assert math.isnan(bins[4]["observed"])


def test_summary_arithmetic():
    runs = [{"steps": STEPS, "tokens": 11, "decode_seconds": 2.0, "stages": {"draft": 0.5, "other": 0.1}},
            {"steps": [PREFILL, StepRecord(drafted=(3,), emitted=(3, 4))], "tokens": 3, "decode_seconds": 0.5,
             "stages": {"draft": 0.25}}]
    summary = summarize(runs)
    assert summary["generated_tokens"] == 14
    assert summary["decode_tokens_per_s"] == pytest.approx((10 + 2) / 2.5)
    assert summary["mean_tokens_per_step"] == pytest.approx(14 / 7)
    assert summary["time_breakdown_s"]["draft"] == pytest.approx(0.75)
    assert summary["tokens_per_step_histogram"] == [0, 1, 2, 1, 1]


def test_first_configuration_must_be_the_baseline_and_repeats_positive(tiny_ir):
    with pytest.raises(ValueError, match="must be target only"):
        run_benchmark(tiny_ir[0], [BenchConfig(tiny_ir[1])], [])
    with pytest.raises(ValueError, match="repeats=0"):
        run_benchmark(tiny_ir[0], [BenchConfig(None)], [], repeats=0)


def test_a_page_counts_the_median_of_its_repeats():
    from utils.evaluation.benchmark import _median_run

    runs = [{"steps": [1], "tokens": 5, "decode_seconds": seconds, "stages": {"draft": seconds / 2}, "text": "t"}
            for seconds in (3.0, 1.0, 2.0)]
    assert _median_run(runs) == {"steps": [1], "tokens": 5, "decode_seconds": 2.0, "stages": {"draft": 1.0},
                                 "text": "t"}


@pytest.fixture(scope="module")
def results(tiny_ir):
    from utils.pages.reading_pages import sample_pages

    configs = [BenchConfig(None), BenchConfig(tiny_ir[1]), BenchConfig(tiny_ir[1], 0, 4)]
    return run_benchmark(tiny_ir[0], configs, sample_pages()[:2], max_new_tokens=16, repeats=2, device="CPU",
                         precision="f32", draft_precision="default", progress=False)


def test_results_schema_and_invariant(results):
    """The draft at the device's own precision (bf16 here) never changes the f32 target's output."""
    json.dumps(results, allow_nan=False)  # valid JSON: no NaN
    assert results["schema_version"] == 5 and results["draft_precision"] == "default"
    assert results["output_mismatches"] == []
    assert results["repeats"] == 2 and results["precision"] == "f32" and results["inference_precision"] == "f32"
    names = [config["name"] for config in results["configurations"]]
    assert names == ["target only", "draft, Top-K scorer", "draft, dense walk, 4 drafts"]
    keys = {"decode_tokens_per_s", "speedup", "mean_tokens_per_step", "tokens_per_step_histogram",
            "conditional_acceptance", "time_breakdown_s", "confidence", "generated_tokens", "pages"}
    for config in results["configurations"]:
        assert keys <= set(config)
        assert config["pages"] == 2  # one median record per page, whatever the repeats
        assert len(config["speedup_by_repeat"]) == 2 and all(ratio > 0 for ratio in config["speedup_by_repeat"])
    baseline = results["configurations"][0]
    assert baseline["speedup"] == 1.0 and baseline["mean_tokens_per_step"] == 1.0
    assert baseline["speedup_by_repeat"] == [1.0, 1.0]
    assert results["configurations"][1]["generated_tokens"] == baseline["generated_tokens"]
    sweep = results["configurations"][1]["confidence"]["threshold_sweep"]
    assert [row["threshold"] for row in sweep] == list(THRESHOLD_SWEEP)
    assert sweep[0]["drafts verified at threshold"] == sweep[0]["drafts verified"]  # threshold 0 verifies all
    verified = [row["drafts verified at threshold"] for row in sweep]
    assert verified == sorted(verified, reverse=True), "a higher threshold never verifies more"


def test_markdown_report_has_the_seed_table_shape(results):
    table = markdown_report(results).splitlines()
    assert table[0] == ("| Draft | Markov head | Drafts per step | Decode tok/s (median runs) | Speedup (median repeat) "
                        "| Speedup min to max over repeats | Tokens per step |")
    assert table[2].startswith("| (target alone) |") and "1.00x" in table[2]
    assert "dense walk (top_k=0)" in table[4] and "| 4 |" in table[4]
    low, high = (min(results["configurations"][2]["speedup_by_repeat"]),
                 max(results["configurations"][2]["speedup_by_repeat"]))
    assert f"| {low:.2f}x to {high:.2f}x |" in table[4]
    for config in results["configurations"]:  # one estimator: the speedup is the median repeat, inside the spread
        assert config["speedup"] == statistics.median(config["speedup_by_repeat"])
        assert min(config["speedup_by_repeat"]) <= config["speedup"] <= max(config["speedup_by_repeat"])


def test_command_line_writes_json(tiny_ir, tmp_path, capsys):
    out = tmp_path / "results.json"
    assert main(["--target", str(tiny_ir[0]), "--draft", str(tiny_ir[1]), "--pages", "1", "--max-new-tokens", "8",
                 "--device", "CPU", "--precision", "f32", "--repeats", "1", "--json", str(out)]) == 0
    assert "| (target alone) |" in capsys.readouterr().out
    assert len(json.loads(out.read_text())["configurations"]) == 2


def test_every_plot_labels_its_axes_and_shows_a_legend_or_title(results):
    import matplotlib

    matplotlib.use("Agg")
    from utils.evaluation import plots

    top_k = results["configurations"][1]
    names = [config["name"] for config in results["configurations"][1:]]
    axes = [plots.plot_tokens_per_step_histogram(top_k), plots.plot_conditional_acceptance(results),
            plots.plot_sweep(results, "draft"), plots.plot_configurations(results, names, "formats"),
            plots.plot_time_breakdown(results), plots.plot_reliability(top_k),
            plots.plot_threshold_sweep(top_k, default=0.5),
            plots.plot_threshold_sweep(top_k, default=0.5, times=[1.0] * len(THRESHOLD_SWEEP))]
    for ax in axes:
        assert ax.get_xlabel() or ax.get_xticklabels(), ax.get_title()
        assert ax.get_ylabel() and ax.get_title()
    timed = axes[-1]
    assert "ms per token (estimated from this run's stage times)" in [text.get_text()
                                                                     for text in timed.get_legend().get_texts()]
    acceptance = axes[1]
    counts = [text.get_text() for text in acceptance.texts]
    rows = [row for config in results["configurations"][1:] for row in config["conditional_acceptance"]
            if row["rate"] is not None]
    assert counts == [f"{row['accepted']}/{row['reached']}" for row in rows]


def _sweep_config(name: str, rows: list[tuple[float, int, int, int]], *, verification_s: float,
                  other_s: float = 0.0) -> dict:
    """A configuration with a replayed sweep: rows of (threshold, steps, drafts verified at it, accepted at it)."""
    sweep = [{"threshold": threshold, "steps": steps, "drafts verified": rows[0][2], "accepted drafts": rows[0][3],
              "drafts verified at threshold": verified, "accepted drafts at threshold": accepted}
             for threshold, steps, verified, accepted in rows]
    return {"name": name, "confidence": {"threshold_sweep": sweep},
            "time_breakdown_s": {"draft": other_s, "markov_head": 0.0, "other": 0.0, "verification": verification_s}}


def test_threshold_times_come_from_the_runs_own_stage_times():
    # 10 steps each: 2 drafts verified cost 10 ms a step, 8 drafts 16 ms: the verification line is 8 + v ms
    short = _sweep_config("2 drafts", [(0.0, 10, 20, 10)], verification_s=0.100)
    long = _sweep_config("8 drafts", [(0.0, 10, 80, 50), (0.5, 10, 40, 45)], verification_s=0.160, other_s=0.050)
    results = {"configurations": [short, long]}
    times = threshold_sweep_times(results, "8 drafts", ["2 drafts", "8 drafts"])
    # threshold 0: 5 ms of draft + (8 + 8) ms of verification over 6 tokens; threshold 0.5: 5 + (8 + 4) over 5.5
    assert times == pytest.approx([21 / 6, 17 / 5.5])
    with pytest.raises(ValueError, match="two counts"):
        threshold_sweep_times(results, "8 drafts", ["8 drafts"])
