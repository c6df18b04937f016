"""Trains the tiny target to read typewriter pages, and measures how well it reads (character error rate).

A model of two megabytes, trained from random weights on one CPU thread, learns to read generated pages in
about 40 minutes when four things hold (`docs/tiny-pair.md` has the learning curve):

1. **Glyphs it can resolve.** Typewriter pages (`utils.pages.typewriter`) put one character in each
   28-pixel cell, which is one image token, and the processor passes such a page at its own size. Image token k
   of a page is character k of its text (rows padded to the page width, a line break in the blank last column,
   EOS in the last row's). The shipped tokenizer gives one token per character (`READING_PAIR`); with merges, a
   token writes the cells of its characters (`answer_cells`).
2. **Pages of one shape** (`PAGE_ROWS` x `PAGE_WIDTH`): the offset from the position writing character k to
   image token k is then the same on every page, for the target and for the draft that later reads ahead of it.
3. **Dense supervision of the image tokens.** A linear head, used only in training, names the character of every
   image token from its features as they enter the language model (`glyph_weight`). Without it the vision tower
   learns only through the answer, which is slow.
4. **An alignment signal in training only.** The language model's full-attention layers are told where to look:
   the position that writes character k attends to image token k (`alignment_weight`, the negative log of that
   attention weight, in every head). A reader of merged tokens is told it by slots (`slot_cells`): head h looks at
   character h of its token, and past the token's end at the characters after it, so that the heads hand it the
   token's glyphs in order and what follows. Told only "look at the token's cells", heads summed the glyphs of a
   merge: teacher-forced, such a reader wrote the first character alone or guessed the rest (`docs/tiny-pair.md`).
   Nothing of this reaches inference: positions stay the engine's ordinary sequential ones, and the head and the
   loss are dropped when training ends.

Every step trains on `examples_per_step` generated pages (`utils.pages.reading_pages`), inked at random
(glyph size, grey levels, glyphs moved by up to 2 pixels), with every linear layer's input perturbed by
`precision_noise` (`add_precision_noise`), so that the answers keep their margins under a lower precision's
rounding. A learning curve (greedy CER on held-out pages, whose rows no training page shows) is measured at
`checkpoints` points; the time spent measuring it is not counted as training time.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import torch

from utils.evaluation.character_error_rate import character_error_rate
from utils.pages.reading_pages import (HARD_KINDS, LAYOUT_KINDS, WORD_KINDS, ReadingPage, iter_reading_pages,
                                       reading_pages)
from utils.contract.target import TARGET_CONFIG, TYPEWRITER_PAGE
from utils.pages.typewriter import CELL, PAGE_ROWS, PAGE_WIDTH, Ink, grid_text, joined_reading, text_cells
from utils.tiny.config import Checkpoints, ReaderConfig
from utils.tiny.distill_data import prompt_inputs
from utils.tiny.pretrain import zero_padding_rows
from utils.tiny.target import quiet_progress_bars
from utils.tiny.training import quiet_single_thread, train_steps

__all__ = ["ReadingScore", "ReaderReport", "FirstPhase", "READING_SLACK", "read_pages", "score_readings",
           "answer_cells", "slot_cells", "reading_losses", "add_precision_noise", "train_reader", "trimmed",
           "grow_vocabulary",
           "train_merges", "mark_typewriter_reader",
           "reading_summary"]

READING_SLACK = 8  # a reading may run this many tokens past the page's text before it is cut


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
    """The model's greedy reading of every page (special tokens dropped), cut `READING_SLACK` tokens past the
    page's own text: a reading that does not stop costs its extra characters, not minutes."""
    readings = []
    for page in pages:
        inputs = prompt_inputs(processor, page.image, prompt)
        budget = len(processor.tokenizer(page.text, add_special_tokens=False).input_ids) + READING_SLACK
        output = model.generate(**inputs, max_new_tokens=budget, do_sample=False)
        readings.append(processor.tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
    return readings


def score_readings(pages: Sequence[ReadingPage], readings: Sequence[str]) -> ReadingScore:
    """CER of `readings` against the pages' texts, overall and by kind (one reading per page, in order)."""
    pairs = list(zip(pages, readings, strict=True))
    by_kind = {kind: character_error_rate((read, page.text) for page, read in pairs if page.kind == kind)
               for kind in dict.fromkeys(page.kind for page in pages)}
    return ReadingScore(character_error_rate((read, page.text) for page, read in pairs), by_kind, tuple(readings))


def answer_cells(tokenizer, text: str, *, width: int, rows: int) -> tuple[list[int], list[list[int]]]:
    """The answer's tokens (the text's, then EOS) and the page cells each one writes: the cells of its characters
    (`text_cells`, by the tokenizer's offsets), the page's last cell for EOS. A token of a merge spans several.

    Args:
        tokenizer: a fast tokenizer (offsets mapping).
        text: the page's text as the reader writes it.
        width, rows: the page's grid: `rows` rows of `width` characters, then the blank last column.

    Returns:
        (token ids, cells of each token), as long as each other.
    """
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    cells = text_cells(text, width=width, rows=rows)
    spans = [cells[start:end] for start, end in encoded.offset_mapping]
    if [cell for span in spans for cell in span] != cells[:-1]:
        raise ValueError(f"the tokenizer's offsets do not split {text!r} into its characters, each once: "
                         f"{encoded.offset_mapping}")
    return [*encoded.input_ids, tokenizer.eos_token_id], [*spans, cells[-1:]]


def slot_cells(spans: Sequence[Sequence[int]], heads: int) -> torch.Tensor:
    """The cell each attention head of a token's writer is told to look at (`reading_losses` with `slots`): head h
    at character h of the token, counted on from its first; past the page's last character, the EOS cell.

    Args:
        spans: the cells each answer token writes (`answer_cells`), EOS's last.
        heads: the query heads of a full-attention layer.

    Returns:
        LongTensor [heads, tokens]: a cell index for every head and answer token.
    """
    cells = [cell for span in spans for cell in span]
    starts = itertools.accumulate((len(span) for span in spans[:-1]), initial=0)
    return torch.tensor([[cells[min(start + head, len(cells) - 1)] for head in range(heads)]
                         for start in starts]).T


def _glyph_labels(tokenizer, text: str, *, width: int, rows: int) -> list[int]:
    """What the glyph head names at every cell of the page: the byte-level token of its character in the page's grid
    (`grid_text`: blank cells are spaces, each row's last column a line break), EOS at the last cell, whatever
    tokens the answer is written in."""
    grid = grid_text(text, width=width, rows=rows)
    chars = sorted(set(grid))
    tokens = tokenizer(chars, add_special_tokens=False).input_ids
    if any(len(token) != 1 for token in tokens):
        raise ValueError(f"the tokenizer has no single token for every character of {''.join(chars)!r}")
    byte_token = {char: token[0] for char, token in zip(chars, tokens)}
    return [*(byte_token[char] for char in grid), tokenizer.eos_token_id]


def reading_losses(model, glyph_head: torch.nn.Linear, processor, page: ReadingPage, prompt: str, *,
                   slots: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The three losses of one page: the answer's cross-entropy, the glyph head's and the attention alignment's.

    Args:
        model: the target (eager attention, so that the attention weights come back).
        glyph_head: Linear(text hidden size -> vocabulary): names the character of an image token.
        processor: the target's processor (a fast tokenizer, with or without merges).
        page: a typewriter page at the processor's own scale: image token k is cell k of its grid; its text may
            leave out trailing spaces and blank rows (`text_cells`).
        prompt: the user prompt.
        slots: align each head with one character (`slot_cells`) instead of every head with the token's cells.

    Returns:
        (answer loss, glyph loss, alignment loss): the answer's cross-entropy, a mean over its tokens; the glyph
        head's, a mean over the page's cells, each named by its character's byte-level token (`_glyph_labels`); and
        the negative log of the attention the position writing each answer token pays to the cells of its
        characters (`answer_cells`), a mean over tokens, heads and full-attention layers. With one token per
        character every token has one cell, and a padded page's text names every cell as its answer does.
    """
    tokenizer = processor.tokenizer
    inputs = prompt_inputs(processor, page.image, prompt)
    columns, rows = page.image.width // CELL, page.image.height // CELL
    answer, spans = answer_cells(tokenizer, page.text, width=columns - 1, rows=rows)
    prompt_length = inputs["input_ids"].shape[1]
    input_ids = torch.cat((inputs["input_ids"], torch.tensor([answer])), dim=1)
    image_positions = (input_ids[0] == model.config.image_token_id).nonzero()[:, 0]
    if len(image_positions) != rows * columns or page.image.size != (columns * CELL, rows * CELL):
        raise ValueError(f"page {page.name!r} has {len(image_positions)} image tokens for a page of {rows} x "
                         f"{columns} cells of {CELL} pixels: not a typewriter page at the processor's own scale")
    output = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                   pixel_values=inputs["pixel_values"], target_sizes=inputs["target_sizes"],
                   output_attentions=True, output_hidden_states=True)
    writers = torch.arange(prompt_length - 1, prompt_length - 1 + len(answer))  # position k writes answer token k
    answer_loss = torch.nn.functional.cross_entropy(output.logits[0, writers], torch.tensor(answer))
    glyphs = torch.tensor(_glyph_labels(tokenizer, page.text, width=columns - 1, rows=rows))
    glyph_loss = torch.nn.functional.cross_entropy(glyph_head(output.hidden_states[0][0, image_positions]), glyphs)
    attentions = [weights[0][:, writers][:, :, image_positions] for weights in output.attentions
                  if weights is not None]  # [heads, answer tokens, cells] per full-attention layer
    if slots:
        looked_at = slot_cells(spans, heads=attentions[0].shape[0])
        attended = [weights.gather(2, looked_at[..., None])[..., 0] for weights in attentions]
    else:
        shown = torch.zeros(len(answer), len(image_positions))  # [answer tokens, cells]: 1 where the token writes it
        for token, cells in enumerate(spans):
            shown[token, cells] = 1.0
        attended = [(weights * shown).sum(-1) for weights in attentions]
    alignment_loss = -torch.stack([torch.log(weights + 1e-6).mean() for weights in attended]).mean()
    return answer_loss, glyph_loss, alignment_loss


def add_precision_noise(model: torch.nn.Module, sigma: float) -> list:
    """Multiplies the input of every linear layer of `model` by (1 + N(0, sigma^2)) while it trains (not in eval):
    noise like a lower precision's rounding, so training widens the margins that rounding would cross.

    Returns the hooks' handles (`handle.remove()` takes the noise away)."""
    def perturb(module, args):
        if module.training:
            return (args[0] * (1 + sigma * torch.randn_like(args[0])), *args[1:])
    return [module.register_forward_pre_hook(perturb) for module in model.modules()
            if isinstance(module, torch.nn.Linear)] if sigma else []


@dataclass(frozen=True)
class FirstPhase:
    """A reader already trained with a config's first phase (`ReaderConfig.first_phase_options`): `train_reader`
    starts its refining from these weights instead of training them again (`utils.tiny.pair.first_phase_reader`
    checks that they were made so)."""

    target: Path  # the target folder holding the first phase's weights
    report: dict  # what that training measured (`ReaderReport.as_dict`, from its pair's manifest)


def trimmed(page: ReadingPage) -> ReadingPage:
    """The page with the text a reader of unpadded rows writes: every row without its trailing spaces, the blank rows
    after the last written one dropped (`joined_reading`)."""
    return replace(page, text=joined_reading([page.text]))


def grow_vocabulary(reader_dir: Path | str, target_dir: Path | str, *, seed: int = 0) -> None:
    """Gives the target in `target_dir` the weights of the one-token-per-character reader in `reader_dir`.

    The two must have the same sizes but the vocabulary, and the target's tokenizer must start with the reader's
    tokens (a byte-level BPE keeps its bytes and special tokens first and appends its merges). Every weight is copied;
    the embedding row of each merged token (tied: also its output row) starts as its first byte's, plus noise of
    0.01, so the grown reader writes a merge where it wrote that byte, and its training only has to tell them apart.
    The weights file of `target_dir` is rewritten. A ValueError names what does not fit.
    """
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    reader = AutoModelForImageTextToText.from_pretrained(reader_dir)
    target = AutoModelForImageTextToText.from_pretrained(target_dir)
    reader_tokens = AutoTokenizer.from_pretrained(reader_dir)
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    known = len(reader_tokens)
    if tokenizer.convert_ids_to_tokens(list(range(known))) != reader_tokens.convert_ids_to_tokens(list(range(known))):
        raise ValueError(f"{target_dir}: its tokenizer does not start with the {known} tokens of the reader in "
                         f"{reader_dir}; a grown reader needs them at the same ids")
    weights, grown = reader.state_dict(), target.state_dict()
    differing = [name for name in grown if name not in weights or (
        grown[name].shape != weights[name].shape and grown[name].shape[1:] != weights[name].shape[1:])]
    if differing or grown.keys() != weights.keys():
        raise ValueError(f"{target_dir}: the target is not the reader's architecture ({', '.join(differing[:3])})")
    generator = torch.Generator().manual_seed(seed)
    first_bytes = [tokenizer.convert_tokens_to_ids(tokenizer.convert_ids_to_tokens(index)[0])
                   for index in range(known, len(tokenizer))]
    rows = {}  # the grown rows of each embedding table (tied tables are one, and get one draw of noise)
    for name, weight in weights.items():
        if grown[name].shape == weight.shape:
            grown[name] = weight
            continue
        if weight.data_ptr() not in rows:
            table = torch.zeros_like(grown[name])
            table[:known] = weight[:known]
            table[known:len(tokenizer)] = weight[first_bytes] + 0.01 * torch.randn(
                len(first_bytes), weight.shape[1], generator=generator)
            rows[weight.data_ptr()] = table
        grown[name] = rows[weight.data_ptr()]
    target.load_state_dict(grown)
    with quiet_progress_bars():
        target.save_pretrained(target_dir)


def _reader_in_training(weights: Path, target_dir: Path, config: ReaderConfig, held_out: Sequence[ReadingPage]):
    """The reader with the weights in `weights` (eager attention, whose weights the alignment reads) and the processor
    of `target_dir`, its training's precision noise on, and a function that scores its greedy readings of pages (by
    default `held_out`) in eval mode: (model, processor, noise handles, score)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(weights, attn_implementation="eager")
    noise = add_precision_noise(model, config.precision_noise)
    processor = AutoProcessor.from_pretrained(target_dir)

    def held_out_score(pages: Sequence[ReadingPage] = held_out) -> ReadingScore:
        model.eval()
        score = score_readings(pages, read_pages(model, processor, pages, prompt=config.prompts[0]))
        model.train()
        return score

    return model, processor, noise, held_out_score


def _measured_steps(steps: int, points: int) -> set[int]:
    """The steps before which the curve is measured: evenly spaced, the first before any training."""
    return {steps * index // points for index in range(points)}


def train_reader(target_dir: Path | str, config: ReaderConfig | None = None, *,
                 first_phase: FirstPhase | None = None, checkpoints: Checkpoints | None = None) -> ReaderReport:
    """Trains every weight of the target in `target_dir` to read typewriter pages, and saves it in place.

    Two phases, each with its own optimiser and page stream: `config.steps` on `config.kinds`, then
    `config.refine_steps` on `config.refine_kinds` (look-alike glyphs and repeating rows between the first
    phase's kinds, `config.refine_unmoved_share` of the pages with no glyph moved in its cell), where the first
    phase's reader still failed. The glyph head starts afresh in each phase, so a refining that starts from a saved
    first phase (`first_phase`) gives the bits of one that follows it in memory.

    Args:
        target_dir: the tiny target folder (transformers); the weights file is rewritten, the configs, processor
            and tokenizer are kept.
        config: data, training and measuring options; defaults to `ReaderConfig()`.
        first_phase: start from a reader trained with this config's first phase instead of training it again; its
            learning curve and time open the report's.
        checkpoints: save each phase's progress there (`read`, `refine`) and resume from it: the same reader, its
            curve and its training time as a training that ran through.

    Returns:
        A `ReaderReport`; its held-out score is measured on `config.held_out_pages` pages of `PAGE_KINDS` after
        training, and by kind on as many pages of `HARD_KINDS`.
    """
    config = config or ReaderConfig()
    checkpoints = checkpoints and checkpoints.stamped("read", config.options())
    target_dir = Path(target_dir)
    held_out = reading_pages(config.held_out_pages, seed=config.seed, split="held-out")
    phases = [] if first_phase else [(config.steps, config.kinds, config.learning_rate, config.checkpoints)]
    if config.refine_steps:
        phases.append((config.refine_steps, config.refine_kinds, config.refine_learning_rate, _REFINE_CHECKPOINTS))
    with quiet_single_thread():
        torch.manual_seed(config.seed)
        model, processor, noise, held_out_score = _reader_in_training(
            first_phase.target if first_phase else target_dir, target_dir, config, held_out)
        examples = first_phase.report["examples"] if first_phase else 0
        train_seconds = first_phase.report["train_seconds"] if first_phase else 0.0
        # the first phase's last point is the refining's first, measured again below
        curve = [tuple(point) for point in first_phase.report["curve"][:-1]] if first_phase else []
        losses = [first_phase.report["first_loss"]] if first_phase else []
        for index, (steps, kinds, learning_rate, points) in enumerate(phases):
            refining = index > 0 or first_phase is not None
            seed = config.seed + (_REFINE_SEED if refining else 0)
            if refining:
                torch.manual_seed(seed)
            phase_losses, seconds = _train_phase(
                model, processor, config, kinds=kinds, steps=steps, learning_rate=learning_rate, seed=seed,
                refining=refining, measured_at=_measured_steps(steps, points), curve=curve, examples=examples,
                held_out_score=held_out_score, checkpoints=checkpoints)
            losses += phase_losses
            zero_padding_rows(model, tokenizer_size=len(processor.tokenizer))  # as a saved first phase has them
            examples += steps * config.examples_per_step
            train_seconds += seconds
        for handle in noise:
            handle.remove()
        score = held_out_score()
        curve.append((examples, score.cer))
        hard = held_out_score(reading_pages(config.held_out_pages, seed=config.seed, split="held-out",
                                            kinds=HARD_KINDS))
        model.eval()
        with quiet_progress_bars():
            model.save_pretrained(target_dir)
    held_out_score_by_kind = ReadingScore(score.cer, score.cer_by_kind | hard.cer_by_kind, score.readings)
    return ReaderReport(examples, train_seconds, losses[0], losses[-1], tuple(curve), held_out_score_by_kind)


def train_merges(target_dir: Path | str, reader: FirstPhase, config: ReaderConfig,
                 checkpoints: Checkpoints | None = None) -> ReaderReport:
    """Teaches a one-token-per-character reader to write merged tokens and rows without their trailing spaces.

    The reader in `reader.target` (trained as `config`'s first phases: `train_reader`) is grown into the target of
    `target_dir`, whose tokenizer has merges (`grow_vocabulary`), and trained `config.merge_steps` steps on
    `config.merge_kinds`, every page's text as such a reader writes it (`trimmed`), with a fresh optimiser and page
    stream, `config.refine_unmoved_share` of the glyphs unmoved and the alignment `config.merge_alignment` names
    (`reading_losses`: by slots, each head with one character of the token or of those after it). Nothing tells the
    reader where a row's text ends but the page: it must count every space it writes from the glyphs, as a reader of
    laid-out text must.

    Returns:
        The `ReaderReport` of the whole reading: the first phases' curve and time (`reader.report`), then this
        training's; its held-out score is measured as `train_reader`'s, on the trimmed pages, and by kind on as many
        pages of `HARD_KINDS`, of `LAYOUT_KINDS` and of `WORD_KINDS`.
    """
    checkpoints = checkpoints and checkpoints.stamped("read", config.options())
    target_dir = Path(target_dir)
    grow_vocabulary(reader.target, target_dir, seed=config.seed)
    held_out = [trimmed(page) for page in reading_pages(config.held_out_pages, seed=config.seed, split="held-out")]
    with quiet_single_thread():
        torch.manual_seed(config.seed + _MERGE_SEED)
        model, processor, noise, held_out_score = _reader_in_training(target_dir, target_dir, config, held_out)
        curve = [tuple(point) for point in reader.report["curve"][:-1]]
        examples = reader.report["examples"]
        losses, seconds = _train_phase(
            model, processor, config, kinds=config.merge_kinds, steps=config.merge_steps,
            learning_rate=config.merge_learning_rate, seed=config.seed + _MERGE_SEED, refining=True,
            measured_at=_measured_steps(config.merge_steps, _REFINE_CHECKPOINTS), curve=curve, examples=examples,
            held_out_score=held_out_score, checkpoints=checkpoints, page_text=trimmed, name="merge",
            slots=config.merge_alignment == "slots")
        zero_padding_rows(model, tokenizer_size=len(processor.tokenizer))
        examples += config.merge_steps * config.examples_per_step
        for handle in noise:
            handle.remove()
        score = held_out_score()
        curve.append((examples, score.cer))
        by_kind = score.cer_by_kind
        for kinds in (HARD_KINDS, LAYOUT_KINDS, WORD_KINDS):
            by_kind |= held_out_score([trimmed(page) for page in reading_pages(
                config.held_out_pages, seed=config.seed, split="held-out", kinds=kinds)]).cer_by_kind
        model.eval()
        with quiet_progress_bars():
            model.save_pretrained(target_dir)
    return ReaderReport(examples, reader.report["train_seconds"] + seconds, reader.report["first_loss"], losses[-1],
                        tuple(curve), ReadingScore(score.cer, by_kind, score.readings))


_MERGE_SEED = 200  # added to the seed for the merge training's pages, prompts and glyph head: a stream of its own
_REFINE_CHECKPOINTS = 2  # the curve's points during refining: its start and its middle (then the end)
_REFINE_SEED = 100  # added to the seed for the refining's pages, prompts and glyph head: a stream of its own


def _train_phase(model, processor, config: ReaderConfig, *, kinds: tuple[str, ...], steps: int, learning_rate: float,
                 seed: int, refining: bool, measured_at: set[int], curve: list, examples: int, held_out_score,
                 checkpoints: Checkpoints | None, page_text: Callable[[ReadingPage], ReadingPage] = lambda page: page,
                 name: str | None = None, slots: bool = False) -> tuple[list[float], float]:
    """One phase of `train_reader`: `steps` steps of `config.examples_per_step` pages of `kinds`, a glyph head of
    its own, the curve measured before each step of `measured_at` and appended to `curve`. Returns every step's loss
    and the training's seconds, the measuring's excluded. A refining phase leaves `config.refine_unmoved_share` of
    its pages' glyphs unmoved (`Ink.random`); the first phase moves every glyph. Each page is trained on as
    `page_text` gives it (`trimmed`: rows as a reader of merges writes them), aligned by `slots` if set. With
    `checkpoints` it saves its progress as `name` (default `read` or `refine`) and resumes from it, skipping the
    pages already drawn.

    A refining phase's glyph head starts at zero: a random head on a trained reader's features would send
    gradients of a loss of about 15 into them; a zero head sends none until it has learnt something."""
    glyph_head = torch.nn.Linear(model.config.text_config.hidden_size, model.config.text_config.vocab_size)
    if refining:
        torch.nn.init.zeros_(glyph_head.weight)
        torch.nn.init.zeros_(glyph_head.bias)
    unmoved_share = config.refine_unmoved_share if refining else 0.0
    pages = map(page_text, iter_reading_pages(seed=seed, kinds=kinds, sparse_share=config.sparse_share,
                                              ink=partial(Ink.random, unmoved_share=unmoved_share)))
    prompts = np.random.default_rng(seed).integers(0, len(config.prompts), size=steps * config.examples_per_step)
    record = {"curve": [], "measuring": 0.0}  # this phase's points and the seconds spent measuring them

    def step_loss(step: int):
        if step in measured_at:
            start = time.perf_counter()
            record["curve"].append((examples + step * config.examples_per_step, held_out_score().cer))
            record["measuring"] += time.perf_counter() - start
        chosen = range(step * config.examples_per_step, (step + 1) * config.examples_per_step)
        parts = torch.stack([
            torch.stack(reading_losses(model, glyph_head, processor, page, config.prompts[prompts[i]], slots=slots))
            for i, page in zip(chosen, itertools.islice(pages, config.examples_per_step))]).mean(0)
        answer, glyph, alignment = parts
        loss = answer + config.glyph_weight * glyph + config.alignment_weight * alignment
        return loss, {"answer": answer.item(), "glyph": glyph.item(), "align": alignment.item(),
                      "CER": record["curve"][-1][1]}

    model.train()
    losses = train_steps([*model.parameters(), *glyph_head.parameters()], step_loss, steps=steps,
                         learning_rate=learning_rate, warmup_steps=config.warmup_steps,
                         desc=f"training the tiny target to read ({', '.join(dict.fromkeys(kinds))[:40]}...)",
                         checkpoints=checkpoints, name=name or ("refine" if refining else "read"),
                         skip=lambda done: list(itertools.islice(pages, done * config.examples_per_step)),
                         record=record)
    curve.extend(tuple(point) for point in record["curve"])
    return losses, record["seconds"] - record["measuring"]


def mark_typewriter_reader(target_dir: Path | str) -> None:
    """Writes the one page the reader reads into its config.json (`utils.contract.target.TYPEWRITER_PAGE`): the
    runtime then stops a reading at the page's end and says when an image is not such a page."""
    path = Path(target_dir) / TARGET_CONFIG
    config = json.loads(path.read_text(encoding="utf-8"))
    config[TYPEWRITER_PAGE] = {"rows": PAGE_ROWS, "columns": PAGE_WIDTH, "cell": CELL}
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def reading_summary(report: ReaderReport) -> str:
    """The report in a few lines: held-out CER overall and by kind, the learning curve, the training time."""
    by_kind = ", ".join(f"{kind} {cer:.1%}" for kind, cer in report.held_out.cer_by_kind.items())
    curve = ", ".join(f"{examples}: {cer:.1%}" for examples, cer in report.curve)
    return (f"  reading: held-out CER {report.held_out.cer:.1%} ({by_kind}) after {report.examples} pages in "
            f"{report.train_seconds:.0f} s of training\n  learning curve (pages seen: held-out CER): {curve}")
