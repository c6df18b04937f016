"""Trains the tiny target to read generated pages, and measures how well it reads them (character error rate).

The shipped tiny target only learnt to write corpus-like text (`utils.tiny.pretrain`): its answers do not
depend on the page. This trains every weight of the same model, from its random initialisation, on
generated pages of words and numbers (`utils.evaluation.reading_pages`): a page and a chat prompt in, the
page's text and EOS out, loss on the answer only. A learning curve (greedy CER on held-out pages, whose
lines no training page shows) is measured at `checkpoints` points along the way; the time spent measuring
it is not counted as training time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from utils.evaluation.character_error_rate import character_error_rate
from utils.evaluation.reading_pages import ReadingPage, iter_reading_pages, reading_pages
from utils.tiny.config import ReaderConfig
from utils.tiny.distill_data import prompt_inputs
from utils.tiny.pretrain import mean_answer_loss, ocr_example, zero_padding_rows
from utils.tiny.target import quiet_progress_bars
from utils.tiny.training import quiet_single_thread, train_steps

__all__ = ["ReadingScore", "ReaderReport", "read_pages", "score_readings", "train_reader", "reading_summary"]

READ_MAX_NEW_TOKENS = 64  # answer budget of a reading: a page of three lines takes about 40 tokens


@dataclass(frozen=True)
class ReadingScore:
    """Greedy readings of pages and their character error rate, overall and by page kind."""

    cer: float
    cer_by_kind: dict[str, float]
    readings: tuple[str, ...]  # what was read, one per page, in order


@dataclass(frozen=True)
class ReaderReport:
    """What a reader training did: its held-out score, its learning curve and its time."""

    examples: int
    train_seconds: float  # optimisation only (the curve's measurements excluded)
    first_loss: float
    last_loss: float
    curve: tuple[tuple[int, float], ...]  # (training examples seen, held-out CER), the last point after training
    held_out: ReadingScore

    def as_dict(self) -> dict:
        """The figures, JSON-ready."""
        return {"examples": self.examples, "train_seconds": round(self.train_seconds, 1),
                "first_loss": round(self.first_loss, 4), "last_loss": round(self.last_loss, 4),
                "curve": [[examples, round(cer, 4)] for examples, cer in self.curve],
                "held_out_cer": round(self.held_out.cer, 4),
                "held_out_cer_by_kind": {kind: round(cer, 4) for kind, cer in self.held_out.cer_by_kind.items()}}


@torch.no_grad()
def read_pages(model, processor, pages: Sequence[ReadingPage], *, prompt: str) -> list[str]:
    """The model's greedy reading of every page (special tokens dropped), up to `READ_MAX_NEW_TOKENS` tokens."""
    readings = []
    for page in pages:
        inputs = prompt_inputs(processor, page.image, prompt)
        output = model.generate(**inputs, max_new_tokens=READ_MAX_NEW_TOKENS, do_sample=False)
        readings.append(processor.tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
    return readings


def score_readings(pages: Sequence[ReadingPage], readings: Sequence[str]) -> ReadingScore:
    """CER of `readings` against the pages' texts, overall and by kind (one reading per page, in order)."""
    pairs = list(zip(pages, readings, strict=True))
    by_kind = {kind: character_error_rate((read, page.text) for page, read in pairs if page.kind == kind)
               for kind in dict.fromkeys(page.kind for page in pages)}
    return ReadingScore(character_error_rate((read, page.text) for page, read in pairs), by_kind, tuple(readings))


def _checkpoint_steps(config: ReaderConfig) -> set[int]:
    """The steps before which the curve is measured: evenly spaced, the first before any training."""
    return {config.steps * index // config.checkpoints for index in range(config.checkpoints)}


def train_reader(target_dir: Path | str, config: ReaderConfig | None = None) -> ReaderReport:
    """Trains every weight of the target in `target_dir` to read generated pages, and saves it in place.

    Args:
        target_dir: the tiny target folder (transformers); the weights file is rewritten, the configs, processor
            and tokenizer are kept.
        config: data, training and measuring options; defaults to `ReaderConfig()`.

    Returns:
        A `ReaderReport`; its held-out score is measured on `config.held_out_pages` pages after training.
    """
    from transformers import AutoModelForImageTextToText, AutoProcessor

    config = config or ReaderConfig()
    target_dir = Path(target_dir)
    count = config.steps * config.examples_per_step
    held_out = reading_pages(config.held_out_pages, seed=config.seed, split="held-out", max_lines=config.max_lines)
    with quiet_single_thread():
        torch.manual_seed(config.seed)
        model = AutoModelForImageTextToText.from_pretrained(target_dir)
        processor = AutoProcessor.from_pretrained(target_dir)
        pages = iter_reading_pages(seed=config.seed, max_lines=config.max_lines)  # rendered as training goes
        prompts = np.random.default_rng(config.seed).integers(0, len(config.prompts), size=count)
        checkpoints, curve, measuring = _checkpoint_steps(config), [], [0.0]

        def held_out_score() -> ReadingScore:
            start = time.perf_counter()
            model.eval()
            score = score_readings(held_out, read_pages(model, processor, held_out, prompt=config.prompts[0]))
            model.train()
            measuring[0] += time.perf_counter() - start
            return score

        def step_loss(step: int):
            if step in checkpoints:
                curve.append((step * config.examples_per_step, held_out_score().cer))
            chosen = range(step * config.examples_per_step, (step + 1) * config.examples_per_step)
            examples = [ocr_example(processor, page.image, config.prompts[prompts[i]], page.text)
                        for i, page in zip(chosen, pages)]
            return mean_answer_loss(model, examples), {"CER": curve[-1][1]}

        model.train()
        start = time.perf_counter()
        losses = train_steps(model.parameters(), step_loss, steps=config.steps, learning_rate=config.learning_rate,
                             warmup_steps=config.warmup_steps, desc="training the tiny target to read")
        train_seconds = time.perf_counter() - start - measuring[0]
        zero_padding_rows(model, tokenizer_size=len(processor.tokenizer))
        score = held_out_score()
        curve.append((count, score.cer))
        model.eval()
        with quiet_progress_bars():
            model.save_pretrained(target_dir)
    return ReaderReport(count, train_seconds, losses[0], losses[-1], tuple(curve), score)


def reading_summary(report: ReaderReport) -> str:
    """The report in a few lines: held-out CER overall and by kind, the learning curve, the training time."""
    by_kind = ", ".join(f"{kind} {cer:.1%}" for kind, cer in report.held_out.cer_by_kind.items())
    curve = ", ".join(f"{examples}: {cer:.1%}" for examples, cer in report.curve)
    return (f"  reading: held-out CER {report.held_out.cer:.1%} ({by_kind}) after {report.examples} pages in "
            f"{report.train_seconds:.0f} s of training\n  learning curve (pages seen: held-out CER): {curve}")
