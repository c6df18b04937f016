"""The pieces of the real-size CPU benchmarks that run without real-size models: trained-like margins
(`sharpen_margins`, `benchmarks.margins`), the roofline's arithmetic, and the speedup benchmark's report rows."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.cpu_speedup import TARGET_ONLY, report_rows, roofline_rows
from benchmarks.margins import LogitRecorder, margin_percentiles, top_margins
from benchmarks.roofline import bytes_per_token, memory_bandwidth, roofline_row, weight_bytes
from utils.engine.language_model import LanguageModelSession

VOCAB = 2048


def _small_model():
    """A random 4-layer Qwen3.5 whose layers add as much as the token embedding to the residual stream (init std
    0.1), so its margins are a random model's, as at real size."""
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(0)
    config = Qwen3_5TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"], tie_word_embeddings=True, initializer_range=0.1)
    return Qwen3_5ForCausalLM(config).eval()


def _sharpened(input_scale: float):
    """(relative margins, share of positions whose argmax is pi(token read)) of the sharpened small model."""
    import torch

    from benchmarks.real_size_model import sharpen_margins

    model = _small_model()
    permutation = sharpen_margins(model, input_scale=input_scale)
    input_ids = np.random.default_rng(1).integers(VOCAB, size=(1, 64))
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(input_ids)).logits[0].numpy()
    return top_margins(logits)[1], float(np.mean(logits.argmax(-1) == permutation[input_ids[0]]))


def test_sharpen_margins_unties_the_output_embedding_into_the_scaled_input_rows_permuted():
    from benchmarks.real_size_model import sharpen_margins

    model = _small_model()
    embeddings = model.get_input_embeddings().weight.detach().numpy().copy()
    permutation = sharpen_margins(model, input_scale=4.0)
    output = model.get_output_embeddings().weight.detach().numpy()
    assert sorted(permutation.tolist()) == list(range(VOCAB))
    np.testing.assert_array_equal(output[permutation], embeddings)
    np.testing.assert_allclose(model.get_input_embeddings().weight.detach().numpy(), 4.0 * embeddings, rtol=1e-6)
    assert not model.config.tie_word_embeddings
    with pytest.raises(ValueError, match="input_scale=0"):
        sharpen_margins(model, input_scale=0)


def test_a_larger_input_scale_widens_the_margins_and_makes_pi_the_greedy_choice():
    random_margins, random_share = _sharpened(1.0)
    sharp_margins, sharp_share = _sharpened(16.0)
    assert random_share < 0.1 and sharp_share > 0.9, (random_share, sharp_share)
    for percentile in (10, 50):  # the whole distribution moves, the near-ties with it
        assert np.percentile(sharp_margins, percentile) > 5 * np.percentile(random_margins, percentile)


def test_top_margins_and_their_percentiles():
    logits = np.array([[3.0, 1.0, 0.0, 0.0], [0.0, 2.0, 2.0, 0.0]])
    margins, relative = top_margins(logits)
    np.testing.assert_allclose(margins, [2.0, 0.0])
    np.testing.assert_allclose(relative, [2.0 / np.std(logits[0]), 0.0])
    figures = margin_percentiles(logits, percentiles=(0, 100))
    assert figures["steps"] == 2 and figures["margin"] == {0: 0.0, 100: 2.0}
    with pytest.raises(ValueError, match="shape"):
        top_margins(np.zeros(5))


def test_logit_recorder_keeps_what_prefill_and_decode_return_and_passes_the_rest():
    class Session:
        clock = "the session's clock"

        def prefill(self, embeds):
            return np.array([1.0, 0.0]), "hidden"

        def decode_one(self, embeds):
            return np.array([0.0, 1.0]), "hidden"

    recorder = LogitRecorder(Session())
    assert recorder.prefill(None)[1] == "hidden" and recorder.decode_one(None)[1] == "hidden"
    np.testing.assert_array_equal(np.stack(recorder.logits), [[1.0, 0.0], [0.0, 1.0]])
    assert recorder.clock == "the session's clock"


def test_roofline_arithmetic(tmp_path):
    per_token = bytes_per_token(weights=600, state={"kv_cache": 300, "linear_state": 100})
    assert per_token == {"weights": 600, "kv_cache": 300, "linear_state": 100, "total": 1000}
    row = roofline_row(context=8, per_token=per_token, bandwidth=1e5, decode_ms=25.0)
    assert row["bound_ms"] == pytest.approx(10.0) and row["over_bound"] == pytest.approx(2.5)
    assert row["kv_cache_bytes"] == 300 and row["bandwidth_gb_s"] == pytest.approx(1e-4)
    with pytest.raises(ValueError, match="bandwidth"):
        roofline_row(context=8, per_token=per_token, bandwidth=0, decode_ms=1.0)
    (tmp_path / "model.bin").write_bytes(bytes(1234))
    assert weight_bytes(tmp_path / "model.xml") == 1234


def test_memory_bandwidth_reports_positive_rates_and_bounds_by_the_read_rate():
    rates = memory_bandwidth(megabytes=1, repeats=1, threads=2)
    assert min(rates.values()) > 0 and rates["bandwidth"] == rates["read"]  # a decode step reads
    with pytest.raises(ValueError, match="megabytes"):
        memory_bandwidth(megabytes=0)


def test_session_state_bytes_grow_with_the_context_only_in_the_kv_cache(tiny_ir):
    session = LanguageModelSession(tiny_ir[0], max_length=64)
    one, two = session.state_bytes(10), session.state_bytes(20)
    assert 0 < one["kv_cache"] and two["kv_cache"] == 2 * one["kv_cache"]
    assert two["linear_state"] == one["linear_state"] > 0


def _steps(count: int, *, wall: float, emitted: int) -> list[dict]:
    return [{"wall": wall, "target": wall / 2, "draft": 0.0, "markov": 0.0, "session": 0.0, "draft_stage": 0.0,
             "markov_stage": 0.0, "emitted": emitted}] * count


def test_report_rows_give_speedups_per_precision_and_the_agreement_before_the_first_difference():
    def record(wall, emitted, differences=()):
        return {"steps": _steps(4, wall=wall, emitted=emitted), "verified": [15] * 4, "decode_s": [1.0, 1.0],
                "tokens": [40, 40], "differences": list(differences)}

    raw = {(1024, "f32", TARGET_ONLY): record(0.1, 1), (1024, "f32", "draft int4"): record(0.4, 5),
           (1024, "default", TARGET_ONLY): record(0.08, 1),
           (1024, "default", "draft int4"): record(0.2, 5, [{"round": 1, "position": 10,
                                                             "reference_relative_margin": 0.01}])}
    rows = {(row["precision"], row["configuration"]): row
            for row in report_rows(raw, contexts=[1024], precisions=["f32", "default"])}
    assert rows[("f32", "draft int4")]["speedup"] == pytest.approx(1.25)
    assert rows[("default", "draft int4")]["speedup"] == pytest.approx(2.0)
    assert rows[("default", "draft int4")]["speedup_over_f32_target"] == pytest.approx(2.5)
    assert rows[("default", "draft int4")]["agreement"] == pytest.approx(50 / 80)
    assert rows[("f32", "draft int4")]["agreement"] == 1.0
    lines = roofline_rows(list(rows.values()), weights=900, state_bytes=lambda context: {"kv_cache": context,
                                                                                          "linear_state": 76},
                          bandwidth=2e4)
    assert [(line["precision"], line["total_bytes"]) for line in lines] == [("f32", 2000), ("default", 2000)]
    assert lines[0]["decode_ms"] == pytest.approx(100.0) and lines[0]["over_bound"] == pytest.approx(1.0)


def test_a_session_restored_from_a_snapshot_continues_as_it_did(tiny_ir):
    session = LanguageModelSession(tiny_ir[0], max_length=64)
    embeds = np.random.default_rng(0).normal(size=(12, session.config.hidden_size)).astype(np.float32)
    session.prefill(embeds[:8])
    snapshot = session.snapshot()
    first = [session.decode_one(row)[0] for row in embeds[8:]]
    session.restore(snapshot)
    assert session.past_length == 8
    np.testing.assert_array_equal([session.decode_one(row)[0] for row in embeds[8:]], first)


def test_prefill_once_computes_a_context_once_and_restores_it_after(tiny_ir):
    from benchmarks.cpu_speedup import PrefillOnce

    session = PrefillOnce(LanguageModelSession(tiny_ir[0], max_length=64))
    embeds = np.random.default_rng(0).normal(size=(9, session.config.hidden_size)).astype(np.float32)
    logits, _ = session.prefill(embeds[:8])
    after = session.decode_one(embeds[8])[0]
    session.reset()
    inference_seconds = session.clock.seconds
    again, _ = session.prefill(embeds[:8].copy())
    assert session.clock.seconds == inference_seconds  # restored, not run
    np.testing.assert_array_equal(again, logits)
    np.testing.assert_array_equal(session.decode_one(embeds[8])[0], after)


def test_replayed_steps_come_from_the_prompt_the_shipped_draft_serves():
    """The replay rows stand for what a reader of a page gets: steps of the distilled prompt, where the shipped
    pair makes 6.9 tokens per step on the sample pages (f32; the other sample prompt makes 1.1, and recorded with
    both prompts the steps averaged 1.9)."""
    from benchmarks.cpu_speedup import record_tiny_pair_steps

    steps = record_tiny_pair_steps(max_new_tokens=32)
    assert len(steps) >= 10
    assert np.mean([step.accepted for step in steps]) + 1 >= 4.0


def test_int8_matmul_graph_computes_what_the_kernel_benchmark_says_it_measures():
    import openvino as ov

    from benchmarks.fc_kernels import PRECISIONS, int8_matmuls, measure_kernels

    model, reference = int8_matmuls(48, 32, 3)
    x = np.random.default_rng(2).standard_normal((1, 5, 32)).astype(np.float32)
    got = ov.Core().compile_model(model, "CPU", PRECISIONS["f32"])({"x": x})[0]
    assert got.shape == (1, 5, 144)
    assert np.abs(got - reference(x)).max() <= 1e-3 * np.abs(reference(x)).max()
    rows = measure_kernels({"small": (48, 32, 3)}, repeats=1)
    assert [row["precision"] for row in rows] == list(PRECISIONS)
    assert all(row["ms"] > 0 and row["weight_gb_s"] > 0 for row in rows)
