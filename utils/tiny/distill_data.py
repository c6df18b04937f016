"""Training data for distilling the tiny draft: the tiny target's own greedy answers on generated pages.

The draft distils on pages of one of two styles (`training_pages`): random passages of the shipped corpus in
PIL's bitmap font at random widths and column counts (`training_passages`, also what `--pretrain` trains on),
or generated typewriter pages of the training split, the pages a reading target reads. Neither shows a line of
the held-out sample pages, so those stay unseen text and images.
For each (page, prompt) the target answers greedily, then one pass over prompt + answer gives the hidden
states of the draft's target layers at every position: the draft's context.

Shape symbols: S: prompt + answer positions, L: target layers read, H: target hidden size.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from PIL import Image
from tqdm.auto import tqdm

from utils.pages.samples import CORPUS_PATH, printed_sample_pages, render_page
from utils.pages.reading_pages import TRAINING_KINDS, iter_reading_pages
from utils.pages.typewriter import CELL, Ink, text_cells
from utils.reference.speculative import TargetRunner

__all__ = ["DistillSequence", "answer_token_cells", "prompt_inputs", "training_lines", "training_passages",
           "training_pages", "collect_sequences"]


@dataclass(frozen=True)
class DistillSequence:
    """One greedy answer of the target with the draft's context features."""

    token_ids: torch.Tensor  # [S] int64: prompt ids (image placeholders included), then the answer
    target_hidden: torch.Tensor  # [S, L*H] target layer outputs at every position
    prompt_length: int  # P: the first answer token (the first anchor) sits at position P
    image_positions: torch.Tensor  # [I] int64: positions of the image tokens, in the page's order
    # [S - P] int64: the page cell (image token index) where each answer token starts, -1 where the reading does
    # not say (a page that is no typewriter page, a reading that does not fit its grid): `answer_token_cells`
    token_cells: torch.Tensor


def answer_token_cells(tokenizer, answer: list[int], image: Image.Image) -> torch.Tensor:
    """Where on a typewriter page each token of a reading starts: the cell of its first character (`text_cells`
    of the reading, with the reader's rows of any length), the page's last cell for the EOS that ends it. A token of
    several characters spans several cells; the draft's training is told the first (`anchor_batch`). All -1 when
    the image is not a page of whole cells or the reading does not fit its grid.

    Args:
        tokenizer: the target's tokenizer.
        answer: the answer's token ids, EOS last if the reading ended.
        image: the page that was read.
    """
    unknown = torch.full((len(answer),), -1)
    columns, rows = image.width // CELL, image.height // CELL
    if image.size != (columns * CELL, rows * CELL) or columns < 2:
        return unknown
    ended = bool(answer) and answer[-1] == tokenizer.eos_token_id
    pieces = [tokenizer.decode([token]) for token in (answer[:-1] if ended else answer)]
    try:
        cells = text_cells("".join(pieces), width=columns - 1, rows=rows)
    except ValueError:
        return unknown
    starts = np.cumsum([0, *map(len, pieces)])[:-1]
    first = [cells[start] if len(piece) else -1 for start, piece in zip(starts, pieces)]
    return torch.tensor(first + [cells[-1]] * ended, dtype=torch.long)


def prompt_inputs(processor, image, prompt: str) -> dict:
    """Processor inputs (batch of one) for an image and a user prompt, with the generation prompt appended."""
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return processor(images=[image], text=[text], return_tensors="pt")


def training_lines() -> list[str]:
    """The corpus lines training may use: every line that no held-out sample page shows."""
    held_out = {line for page in printed_sample_pages() for line in page.text.splitlines() if line.strip()}
    corpus = CORPUS_PATH.read_text(encoding="utf-8").splitlines()
    return [line for line in corpus if line.strip() and line not in held_out]


def training_passages(count: int, *, seed: int, max_lines: int = 12) -> list[tuple[str, Image.Image]]:
    """`count` random passages of corpus lines that no held-out sample page shows, each rendered as a page.

    Args:
        count: number of passages.
        max_lines: a passage holds 1 to `max_lines` corpus lines.
        seed: the passages and their layouts (1-2 columns, 32-80 characters per line) are a function of the seed.

    Returns:
        (passage text, PIL page image) pairs.
    """
    lines = training_lines()
    rng = np.random.default_rng(seed)
    passages = []
    for _ in range(count):
        length = int(rng.integers(1, max_lines + 1))
        start = int(rng.integers(0, len(lines) - length + 1))
        text = "\n".join(lines[start:start + length])
        passages.append((text, render_page(text, columns=int(rng.integers(1, 3)),
                                           chars_per_line=int(rng.integers(32, 81)))))
    return passages


def training_pages(count: int, *, seed: int, style: str = "corpus", unmoved_share: float = 0.0,
                   kinds: tuple[str, ...] = TRAINING_KINDS) -> list[Image.Image]:
    """`count` training page images: the pages of `training_passages` ("corpus"), or generated typewriter pages
    of the training split inked at random, of `kinds` in turn ("typewriter"; by default documents and unpredictable
    text, `utils.pages.reading_pages.TRAINING_KINDS`): a draft that must guess random strings learns to read ahead.
    `unmoved_share` of the typewriter pages have every glyph unmoved in its cell (`Ink.random`)."""
    if style == "typewriter":
        pages = iter_reading_pages(seed=seed, split="train", kinds=kinds,
                                   ink=partial(Ink.random, unmoved_share=unmoved_share))
        return [page.image for page in itertools.islice(pages, count)]
    return [image for _, image in training_passages(count, seed=seed)]


@torch.no_grad()
def collect_sequences(target, processor, cases: list[tuple], *, hidden_layer_ids: tuple[int, ...],
                      max_new_tokens: int) -> list[DistillSequence]:
    """Greedy answers of the target for (image, prompt) cases, with the hidden states the draft reads.

    Args:
        target: the transformers MiniCPM-OCR target.
        processor: its processor.
        cases: (PIL image, prompt) pairs.
        hidden_layer_ids: the draft's `target_layer_ids`.
        max_new_tokens: answer budget per case.

    Returns:
        One `DistillSequence` per case whose answer has at least two tokens (one anchor and one label).
    """
    runner = TargetRunner(target, hidden_layer_ids=hidden_layer_ids)
    sequences = []
    for image, prompt in tqdm(cases, desc="target answers", leave=False):
        inputs = prompt_inputs(processor, image, prompt)
        prompt_length = inputs["input_ids"].shape[1]
        output = target.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        answer = output[0, prompt_length:]
        if len(answer) < 2:
            continue
        embeds = torch.cat((runner.prompt_embeddings(inputs), runner.embed(answer.tolist())), dim=1)
        _, hidden = runner(embeds)
        image_positions = (output[0] == target.config.image_token_id).nonzero()[:, 0]
        cells = answer_token_cells(processor.tokenizer, answer.tolist(), image)
        sequences.append(DistillSequence(output[0], hidden[0], prompt_length, image_positions, cells))
    return sequences
