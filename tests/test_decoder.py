"""The decoding engine on its own: prompt embeddings in, tokens out, any proposer; the engine benchmark's parts."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.cpu_speedup import RecordedStep, replay_schedule
from benchmarks.stand_ins import ForcedAcceptanceProposer, StepCounters, tau_schedule
from oracle import NoisyAnswer
from utils.engine.decoder import SpeculativeDecoder
from utils.engine.device import F32_PROPERTIES
from utils.engine.draft import DSparkProposer
from utils.engine.language_model import LanguageModelSession
from utils.engine.step_cost import StepCost
from utils.pages.reading_pages import sample_pages
from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline
from utils.pipeline.vision import TextEmbeddings


@pytest.fixture(scope="module")
def pipeline(tiny_ir):
    return SpeculativeOcrPipeline(*tiny_ir, device="CPU", precision="f32")


@pytest.fixture(scope="module")
def text_only(tiny_ir):
    """A text-only engine on the tiny target: its session, its embeddings and its draft, and a random prompt."""
    target, draft = tiny_ir
    session = LanguageModelSession(target, properties=F32_PROPERTIES)
    embed = TextEmbeddings(target, "CPU", properties=F32_PROPERTIES)
    proposer = DSparkProposer.load(draft, "CPU", properties=F32_PROPERTIES, embed=embed)
    ids = np.random.default_rng(0).integers(session.config.vocab_size, size=(1, 45))
    return session, embed, proposer, embed(ids)[0]


def test_the_pipeline_is_its_front_end_plus_the_decoder(pipeline):
    page = sample_pages()[2]
    result = pipeline.generate(page.image, max_new_tokens=40)
    seen = []
    decoded = pipeline.decoder().generate(pipeline.prompt_embeddings(page.image), max_new_tokens=40,
                                          on_step=lambda step, tokens: seen.append((step, list(tokens))))
    assert decoded.tokens == result.tokens
    assert [step for step, _ in seen] == decoded.metrics.steps == result.metrics.steps
    lengths = [len(tokens) for _, tokens in seen]
    assert seen[-1][1] == decoded.tokens and lengths == sorted(set(lengths))  # every step added tokens


def test_any_proposer_gives_the_target_only_tokens(text_only):
    session, embed, _, prompt = text_only
    baseline = SpeculativeDecoder(session, embed, stop_token_ids=()).generate(prompt, max_new_tokens=30)
    assert len(baseline.tokens) == 30 and all(not step.drafted for step in baseline.metrics.steps)
    for seed, error_rate in [(0, 0.0), (1, 0.3)]:
        proposer = NoisyAnswer(tuple(baseline.tokens), seed=seed, error_rate=error_rate)
        decoded = SpeculativeDecoder(session, embed, stop_token_ids=(), proposer=proposer,
                                     block_size=6).generate(prompt, max_new_tokens=30, confidence_threshold=0.2)
        assert decoded.tokens == baseline.tokens
        assert decoded.metrics.num_steps < baseline.metrics.num_steps
        assert all(len(step.drafted) <= 6 for step in decoded.metrics.steps)


def test_a_step_never_copies_the_verification_logits(text_only, monkeypatch):
    """The decoder takes the target's argmax off OpenVINO's output buffer (`verify_greedy`): `verify`, which copies
    the [S, V] logits (16 MB at real size), is for callers who look at logits, and equals it."""
    session, embed, proposer, prompt = text_only
    baseline = SpeculativeDecoder(session, embed, stop_token_ids=()).generate(prompt, max_new_tokens=24)
    session.reset()
    session.prefill(prompt)
    block = embed(np.array([baseline.tokens[:5]]))[0]
    logits, hidden = session.verify(block)
    greedy, greedy_hidden = session.verify_greedy(block)
    np.testing.assert_array_equal(greedy, logits.argmax(-1))
    np.testing.assert_array_equal(greedy_hidden, hidden)

    def copying(*args, **kwargs):
        raise AssertionError("the decoder copied the verification logits")

    monkeypatch.setattr(LanguageModelSession, "verify", copying)
    decoded = SpeculativeDecoder(session, embed, stop_token_ids=(), proposer=proposer,
                                 block_size=proposer.info.block_size).generate(prompt, max_new_tokens=24)
    assert decoded.tokens == baseline.tokens


def test_a_proposer_needs_a_block_size_the_verify_ir_can_take(text_only):
    session, embed, proposer, _ = text_only
    for block_size in (None, 0, session.verify_length):
        with pytest.raises(ValueError, match="block_size"):
            SpeculativeDecoder(session, embed, stop_token_ids=(), proposer=proposer, block_size=block_size)
    decoder = SpeculativeDecoder(session, embed, stop_token_ids=(), proposer=proposer, block_size=4)
    with pytest.raises(ValueError, match="num_assistant_tokens=5"):
        decoder.generate(text_only[3], max_new_tokens=8, num_assistant_tokens=5)


def test_forced_acceptance_reaches_the_requested_tokens_per_step_and_counts_each_part(text_only):
    session, embed, proposer, prompt = text_only
    reference, _, _ = StepCounters(SpeculativeDecoder(session, embed, stop_token_ids=())).run(prompt, 80)
    block_size = proposer.info.block_size
    for tau in (2.0, 3.5):
        forced = ForcedAcceptanceProposer(proposer, reference, schedule=tau_schedule(tau),
                                          vocab_size=session.config.vocab_size)
        decoder = SpeculativeDecoder(session, embed, stop_token_ids=(), proposer=forced, block_size=block_size)
        tokens, steps, seconds = StepCounters(decoder).run(prompt, 60)
        assert tokens == reference[:60] and seconds > 0
        full_steps = steps[:-1]  # the last one may be cut by the budget
        assert sum(step["emitted"] for step in full_steps) / len(full_steps) == pytest.approx(tau, abs=0.1)
        assert all(step["target"] > 0 and step["draft"] > 0 and step["markov"] > 0 for step in steps)
        assert all(step["wall"] >= step["target"] + step["draft"] + step["markov"] for step in steps)


def test_forced_acceptance_without_a_draft_proposes_the_schedule_and_nothing_else(text_only):
    """`benchmarks.chunked_prefill`'s stand-in: no draft to pay for, right for the schedule's count, wrong after."""
    session, embed, _, prompt = text_only
    reference, _, _ = StepCounters(SpeculativeDecoder(session, embed, stop_token_ids=())).run(prompt, 40)
    forced = ForcedAcceptanceProposer(None, reference + [0] * 8, schedule=tau_schedule(3.5),
                                      vocab_size=session.config.vocab_size)
    counters = StepCounters(SpeculativeDecoder(session, embed, stop_token_ids=(), proposer=forced, block_size=6))
    tokens, steps, _ = counters.run(prompt, 40)
    assert tokens == reference and forced.clocks == ()
    assert all(step["draft"] == step["markov"] == 0 for step in steps)
    emitted = [len(step.emitted) for step in counters.last_steps[1:-1]]
    assert emitted == [tau_schedule(3.5)(index)[0] + 1 for index in range(len(emitted))]
    drafted = counters.last_steps[1].drafted
    assert len(drafted) == 6 and len(set(drafted[emitted[0]:])) == 1  # every draft after the wrong one is wrong


def test_a_replay_verifies_only_the_confident_prefix_and_keeps_the_output(text_only):
    """The threshold cuts each step at its first doubtful draft, and a step cost where drafts stop paying for
    themselves (`StepCost`): the verification is shorter, the tokens the same."""
    session, embed, proposer, prompt = text_only
    reference, _, _ = StepCounters(SpeculativeDecoder(session, embed, stop_token_ids=())).run(prompt, 60)
    recorded = [RecordedStep(3, (0.9, 0.8, 0.7, 0.2, 0.9)), RecordedStep(1, (0.95, 0.3, 0.9))]
    forced = ForcedAcceptanceProposer(proposer, reference, schedule=replay_schedule(recorded),
                                      vocab_size=session.config.vocab_size)
    counters = StepCounters(SpeculativeDecoder(session, embed, stop_token_ids=(), proposer=forced,
                                               block_size=proposer.info.block_size))
    dear = StepCost(fixed_ms=100, per_draft_ms=60)  # step 1: E(2) / 220 ms beats E(3) / 280 ms
    for threshold, cost, verified, emitted in [(0.5, None, [3, 1, 3, 1], [4, 2, 4, 2]),
                                               (0.0, None, [8, 8, 8, 8], [4, 2, 4, 2]),
                                               (0.0, dear, [2, 1, 2, 1], [3, 2, 3, 2])]:
        tokens, _, _ = counters.run(prompt, 40, confidence_threshold=threshold, step_cost=cost)
        assert tokens == reference[:40]
        steps = counters.last_steps[1:5]
        assert [len(step.drafted) for step in steps] == verified and [len(step.emitted) for step in steps] == emitted


def test_the_benchmark_measures_a_step_cost_from_a_target_only_run_and_a_run_verifying_every_draft(text_only):
    """`benchmarks.cpu_speedup.measure_step_cost` on the tiny engine: its figures are times, so only their kind is
    checked: a positive fixed part, and the drafts counted as the forced run verified them (all 8)."""
    from benchmarks.cpu_speedup import TARGET_ONLY, measure_step_cost

    session, embed, proposer, prompt = text_only
    reference, _, _ = StepCounters(SpeculativeDecoder(session, embed, stop_token_ids=())).run(prompt, 60)
    forced = ForcedAcceptanceProposer(proposer, reference, schedule=tau_schedule(3.0),
                                      vocab_size=session.config.vocab_size)
    configs = {TARGET_ONLY: (StepCounters(SpeculativeDecoder(session, embed, stop_token_ids=())), 0.0, None),
               "draft tiny": (StepCounters(SpeculativeDecoder(session, embed, stop_token_ids=(), proposer=forced,
                                                              block_size=proposer.info.block_size)), 0.0, None)}
    cost = measure_step_cost(configs, "tiny", prompt, 24)
    assert cost.fixed_ms > 0 and cost.per_draft_ms >= 0
    verified = [len(step.drafted) for step in configs["draft tiny"][0].last_steps[1:-1]]
    assert len(verified) >= 4 and set(verified) == {8}
