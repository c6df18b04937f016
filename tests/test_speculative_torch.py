"""Greedy speculative decoding in PyTorch equals the target's own greedy `generate`, token for token."""

from __future__ import annotations

import functools

import pytest
import torch

from oracle import ORACLE_CASES, NoisyAnswer
from utils.checkpoint.draft import TargetSpec
from utils.engine.step_cost import StepCost
from utils.pages.samples import SAMPLE_PROMPTS as PROMPTS
from utils.pages.reading_pages import sample_pages
from utils.reference.modeling import load_reference_draft
from utils.reference.speculative import DSparkDrafter, TargetRunner, speculative_generate

PAGES = sample_pages()


@pytest.fixture(scope="module")
def models(tiny_pair):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    target = AutoModelForImageTextToText.from_pretrained(tiny_pair.target).eval()
    processor = AutoProcessor.from_pretrained(tiny_pair.target)
    draft = load_reference_draft(tiny_pair.draft, target=TargetSpec.from_folder(tiny_pair.target))
    runner = TargetRunner(target, hidden_layer_ids=draft.config.target_layer_ids)
    return target, processor, draft, runner


@pytest.fixture(scope="module")
def case(models):
    """(page index, prompt index) -> (processor inputs, reference greedy tokens for a budget)."""
    target, processor, _, _ = models

    @functools.cache
    def inputs(page: int, prompt: int):
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPTS[prompt]}]}]
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return processor(images=[PAGES[page].image], text=[text], return_tensors="pt")

    @functools.cache
    def reference(page: int, prompt: int, max_new_tokens: int) -> tuple[int, ...]:
        batch = inputs(page, prompt)
        with torch.no_grad():
            output = target.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False)
        return tuple(output[0, batch["input_ids"].shape[1]:].tolist())

    return inputs, reference


def _eos(target):
    return (target.generation_config.eos_token_id,)


def _check_bookkeeping(result, num_assistant_tokens):
    assert sum(step.accepted + 1 for step in result.steps) == len(result.tokens)
    assert result.steps[0].drafted == ()
    assert all(len(step.drafted) <= num_assistant_tokens for step in result.steps)
    assert result.get_num_accepted_tokens() == len(result.tokens) - len(result.steps)


DSPARK_CASES = [(page, prompt, k) for page, prompt, k in
                zip(range(10), [0, 1] * 5, [8, 3, 7, 1, 8, 5, 2, 8, 4, 6])]


@pytest.mark.parametrize("page, prompt, num_assistant_tokens", DSPARK_CASES)
def test_dspark_draft_output_equals_target_greedy(models, case, page, prompt, num_assistant_tokens):
    """A random draft, rejected nearly always: every block length, both prompts. The dense walk only (the Top-64
    scorer proposed the same drafts on every case); the trained draft, which the target accepts, meets the
    invariant in tests/test_lossless_trained_draft.py."""
    target, _, draft, runner = models
    inputs, reference = case
    drafter = DSparkDrafter(draft, target.get_input_embeddings(), markov_head_top_k=0)
    result = speculative_generate(runner, drafter, inputs(page, prompt), max_new_tokens=40,
                                  num_assistant_tokens=num_assistant_tokens, eos_token_ids=_eos(target))
    assert tuple(result.tokens) == reference(page, prompt, 40)
    _check_bookkeeping(result, num_assistant_tokens)


@pytest.mark.parametrize("page, prompt, seed, error_rate, num_assistant_tokens, max_new_tokens", ORACLE_CASES)
def test_partial_and_full_acceptance_output_equals_target_greedy(models, case, page, prompt, seed, error_rate,
                                                                 num_assistant_tokens, max_new_tokens):
    target, _, _, runner = models
    inputs, reference = case
    answer = reference(page, prompt, max_new_tokens)
    drafter = NoisyAnswer(answer, seed=seed, error_rate=error_rate, vocab_size=target.config.text_config.vocab_size)
    result = speculative_generate(runner, drafter, inputs(page, prompt), max_new_tokens=max_new_tokens,
                                  num_assistant_tokens=num_assistant_tokens, eos_token_ids=_eos(target))
    assert tuple(result.tokens) == answer
    _check_bookkeeping(result, num_assistant_tokens)
    if error_rate == 0.0:  # a perfect draft: every step but the last emits a whole block
        assert [len(step.emitted) for step in result.steps[1:-1]] == [num_assistant_tokens + 1] * (len(result.steps) - 2)


def test_eos_and_the_budget_fall_inside_blocks_in_the_cases_above(models, case):
    """The oracle cases really exercise an EOS inside a block and a budget that ends inside a block."""
    target, _, _, _ = models
    _, reference = case
    eos_inside, budget_inside = False, False
    for page, prompt, _, error_rate, k, budget in ORACLE_CASES:
        answer = reference(page, prompt, budget)
        emitted_before_last = (len(answer) - 1) % (k + 1)  # a perfect draft's last step emits this many
        if error_rate == 0.0 and emitted_before_last not in (0, k + 1):
            eos_inside |= answer[-1] in _eos(target)
            budget_inside |= len(answer) == budget and answer[-1] not in _eos(target)
    assert eos_inside and budget_inside


@pytest.mark.parametrize("cut", [{"confidence_threshold": 0.5},
                                 {"confidence_threshold": 0.0, "step_cost": StepCost(fixed_ms=10, per_draft_ms=2)}])
def test_confidence_threshold_keeps_the_output(models, case, cut):
    target, _, _, runner = models
    inputs, reference = case
    answer = reference(4, 0, 48)
    drafter = NoisyAnswer(answer, seed=3, error_rate=0.1, vocab_size=target.config.text_config.vocab_size)
    result = speculative_generate(runner, drafter, inputs(4, 0), max_new_tokens=48, num_assistant_tokens=8,
                                  eos_token_ids=_eos(target), **cut)
    assert tuple(result.tokens) == answer
    assert any(len(step.drafted) < 8 for step in result.steps[1:])  # some blocks were cut
    _check_bookkeeping(result, 8)


def test_max_new_tokens_must_be_positive(models, case):
    target, _, draft, runner = models
    inputs, _ = case
    with pytest.raises(ValueError, match="max_new_tokens=0"):
        speculative_generate(runner, DSparkDrafter(draft, target.get_input_embeddings()), inputs(0, 0),
                             max_new_tokens=0, num_assistant_tokens=4, eos_token_ids=_eos(target))
