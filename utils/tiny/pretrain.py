"""Trains the tiny target briefly to answer pages with corpus text, so that its greedy answers are learnable.

A random target's greedy answers share a few opening tokens and then wander chaotically: no draft can
predict them (a perfect memoriser of the training answers reaches 1.4 tokens per step on held-out pages).
A real target is a trained language model that writes predictable text. This gives the tiny target the
same character at toy scale: a couple of minutes of causal-LM training on OCR-like examples (a rendered
corpus passage and a chat prompt in, the passage and EOS out, loss on the answer only). It does not learn
to read, but it learns to write corpus-like text and to end its answers.

The padding rows of the tied embedding (beyond the tokenizer) are zeroed again after training, as the
builder made them, so the model keeps giving ids no tokenizer knows a logit of 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from utils.tiny.config import PretrainConfig
from utils.tiny.distill_data import prompt_inputs, training_passages
from utils.tiny.target import quiet_progress_bars
from utils.tiny.training import quiet_single_thread, train_steps

__all__ = ["PretrainReport", "ocr_example", "mean_answer_loss", "answer_loss", "pretrain_target", "zero_padding_rows"]

IGNORE_INDEX = -100  # transformers' label for positions outside the loss


@dataclass(frozen=True)
class PretrainReport:
    """What a pretraining did."""

    examples: int
    first_loss: float
    last_loss: float


def ocr_example(processor, image, prompt: str, text: str) -> dict:
    """Model inputs with `labels` for one page: the prompt, then the answer `text` + EOS, loss on the answer only.

    Args:
        processor: the target's processor.
        image: the page (PIL).
        prompt: the user prompt.
        text: what the answer should say.

    Returns:
        The processor's inputs (batch of one) extended by the answer, and `labels`.
    """
    inputs = prompt_inputs(processor, image, prompt)
    tokenizer = processor.tokenizer
    answer = torch.tensor([tokenizer(text, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]])
    input_ids = torch.cat((inputs["input_ids"], answer), dim=1)
    labels = torch.cat((torch.full_like(inputs["input_ids"], IGNORE_INDEX), answer), dim=1)
    return dict(inputs) | {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}


def mean_answer_loss(model, examples: Sequence[dict]) -> torch.Tensor:
    """Cross-entropy per answer token, pooled over the examples (each example's mean weighted by its length)."""
    tokens = [int((example["labels"] != IGNORE_INDEX).sum()) for example in examples]
    losses = [model(**example).loss * count for example, count in zip(examples, tokens)]
    return torch.stack(losses).sum() / sum(tokens)


@torch.no_grad()
def answer_loss(target_dir: Path | str, passages: Sequence[tuple[str, object]], *,
                prompts: Sequence[str] = PretrainConfig().prompts) -> float:
    """The target's cross-entropy per answer token on (text, page image) passages, asked with every prompt.

    Args:
        target_dir: the transformers target folder.
        passages: (passage text, PIL page) pairs, e.g. the held-out `sample_pages()`.
        prompts: user prompts, each used with every passage.

    Returns:
        Nats per answer token (EOS included).
    """
    from transformers import AutoModelForImageTextToText, AutoProcessor

    with quiet_single_thread():
        model = AutoModelForImageTextToText.from_pretrained(target_dir).eval()
        processor = AutoProcessor.from_pretrained(target_dir)
        examples = [ocr_example(processor, image, prompt, text) for text, image in passages for prompt in prompts]
        return mean_answer_loss(model, examples).item()


def pretrain_target(target_dir: Path | str, config: PretrainConfig | None = None) -> PretrainReport:
    """Trains every weight of the target in `target_dir` on generated OCR examples and saves it in place.

    Args:
        target_dir: the tiny target folder (transformers); the weights file is rewritten, the configs, processor
            and tokenizer are kept.
        config: data and training options; defaults to `PretrainConfig()`.

    Returns:
        A `PretrainReport`.
    """
    from transformers import AutoModelForImageTextToText, AutoProcessor

    config = config or PretrainConfig()
    target_dir = Path(target_dir)
    count = config.steps * config.examples_per_step
    with quiet_single_thread():
        torch.manual_seed(config.seed)
        model = AutoModelForImageTextToText.from_pretrained(target_dir)
        processor = AutoProcessor.from_pretrained(target_dir)
        passages = training_passages(count, seed=config.seed, max_lines=config.max_lines)
        prompts = np.random.default_rng(config.seed).integers(0, len(config.prompts), size=count)
        model.train()

        def step_loss(step: int):
            chosen = range(step * config.examples_per_step, (step + 1) * config.examples_per_step)
            examples = [ocr_example(processor, passages[i][1], config.prompts[prompts[i]], passages[i][0])
                        for i in chosen]
            return mean_answer_loss(model, examples), {}

        losses = train_steps(model.parameters(), step_loss, steps=config.steps, learning_rate=config.learning_rate,
                             desc="pretraining the tiny target")
        model.eval()
        zero_padding_rows(model, tokenizer_size=len(processor.tokenizer))
        with quiet_progress_bars():
            model.save_pretrained(target_dir)
    return PretrainReport(count, losses[0], losses[-1])


@torch.no_grad()
def zero_padding_rows(model, *, tokenizer_size: int) -> None:
    """Zeroes the tied embedding's rows beyond the tokenizer again, so ids no tokenizer knows keep a logit of 0."""
    model.get_input_embeddings().weight[tokenizer_size:] = 0.0
