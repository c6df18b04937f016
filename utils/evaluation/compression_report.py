"""What weight compression costs and keeps: size on disk, draft agreement, target text, tokens per step.

Every run compiles with f32 inference precision (`F32_PROPERTIES`; this CPU defaults to bf16), so the
compressed weights are decompressed to f32 and any difference comes from the weights alone. Needs no torch.

- Sizes: bytes of each IR's weights file (`.bin`) per format; the `.xml` beside it holds the graph only.
- Draft agreement: the reference draft (fp32) drives speculative decoding with the reference target, and
  every other draft runs on exactly the same blocks (same anchor, same new context, its own context cache).
  `top1`: share of block positions whose draft-logit argmax equals the reference's; `walk`: share of the
  Markov walk's tokens (Top-K scorer) equal to the reference's.
- Target text: target-only greedy decoding of each format against the reference, page by page.
- Tokens per step: speculative decoding with the reference target and each draft, pooled over the pages
  (the output is the target's own either way; only the acceptance changes).
- Time per token (`time_per_token`, not part of the report: it is this machine's clock): ms per generated
  token of each target format alone and of speculative decoding with each draft format, median and range over
  repeats, at the precision asked for (the device's own by default, what users run).

Run options shared by the measurements: `pages` (`utils.evaluation.pages.SamplePage`s, or anything with `.image`),
`prompt` (the instruction after each page), `max_new_tokens` (token budget per page), `device` (OpenVINO).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from utils.engine.device import F32_PROPERTIES
from utils.engine.proposal import Proposal
from utils.engine.verification import mean_tokens_per_step
from utils.export.compression import compressed_files
from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT
from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

__all__ = ["REFERENCE_FORMAT", "DraftAgreement", "TargetAgreement", "CompressionReport", "ir_sizes",
           "time_per_token",
           "draft_agreement", "target_agreement", "tokens_per_step", "compression_report"]

REFERENCE_FORMAT = "fp32"


@dataclass(frozen=True)
class DraftAgreement:
    """A draft against the reference draft, on the same blocks."""

    blocks: int  # draft calls compared
    positions: int  # block positions compared (blocks x block size)
    top1: float  # share of positions with the reference's draft-logit argmax
    walk: float  # share of Markov-walk tokens equal to the reference's


@dataclass(frozen=True)
class TargetAgreement:
    """A target's greedy answers against the reference target's, on the same pages."""

    pages: int
    equal_pages: int  # pages whose tokens are identical
    prefix: float  # share of the reference's tokens before the first difference, pooled over the pages


@dataclass(frozen=True)
class CompressionReport:
    """Everything `compression_report` measures, keyed by weight format."""

    sizes: list[dict]  # one row per IR file: {"ir": file name, "<format>": bytes, ...}
    draft: dict[str, DraftAgreement]
    target: dict[str, TargetAgreement]
    tokens_per_step: dict[str, float]


def ir_sizes(folders: Mapping[str, Path | str]) -> list[dict]:
    """Bytes of each IR's weights (`.bin`) per format.

    Args:
        folders: weight format -> export folder of the same model (all target or all draft folders).

    Returns:
        One row per IR file that carries weights (`compressed_files`), `{"ir": name, format: bytes, ...}`.
    """
    names = compressed_files(next(iter(folders.values())))
    return [{"ir": name} | {fmt: (Path(folder) / name).with_suffix(".bin").stat().st_size
                            for fmt, folder in folders.items()} for name in names]


def _require_reference(folders: Mapping[str, Path | str], what: str) -> Path | str:
    """The reference format's folder; a ValueError naming the formats given when it is missing."""
    if REFERENCE_FORMAT not in folders:
        raise ValueError(f"{what} must hold the reference format {REFERENCE_FORMAT!r}, got {sorted(folders)}")
    return folders[REFERENCE_FORMAT]


class _Draft:
    """One draft IR folder's backbone and Markov head, with its own context cache."""

    def __init__(self, folder: Path, device: str):
        from utils.engine.draft import DraftModel, MarkovHead

        self.model = DraftModel(folder, device, properties=F32_PROPERTIES)
        self.markov_head = MarkovHead(folder, device, properties=F32_PROPERTIES)

    def block(self, embeds: np.ndarray, anchor: int, context: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(argmax of the draft logits [B], the whole Markov walk [B]) for one block."""
        logits, hidden = self.model.forward_block(embeds, context[None])
        walk, _ = self.markov_head.walk(logits, hidden, anchor=anchor, num_tokens=len(logits))
        return logits.argmax(-1), walk


class _ComparingProposer:
    """Proposes the reference draft's walk; runs every other draft on the same blocks and counts agreement."""

    clocks = ()

    def __init__(self, reference: _Draft, others: Mapping[str, _Draft], embed, *, mask_token_id: int,
                 block_size: int):
        self.reference, self.others, self.embed = reference, dict(others), embed
        self.mask_token_id, self.block_size = mask_token_id, block_size
        self.counts = {name: np.zeros(4, np.int64) for name in self.others}  # blocks, positions, top1, walk

    def reset(self) -> None:
        for draft in (self.reference, *self.others.values()):
            draft.model.crop(0)

    def propose(self, anchor, context, *, num_tokens, timer) -> Proposal:
        block = np.array([[anchor] + [self.mask_token_id] * (self.block_size - 1)], np.int64)
        embeds = self.embed(block)
        top1, walk = self.reference.block(embeds, anchor, context)
        for name, draft in self.others.items():
            other_top1, other_walk = draft.block(embeds, anchor, context)
            self.counts[name] += [1, len(top1), (other_top1 == top1).sum(), (other_walk == walk).sum()]
        return Proposal(tuple(walk[:num_tokens].tolist()))


def draft_agreement(target: Path | str, drafts: Mapping[str, Path | str], pages: Sequence, *,
                    prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 64, device: str = "CPU"
                    ) -> dict[str, DraftAgreement]:
    """Top-1 and walk agreement of each draft with the reference draft, over the blocks of the sample pages.

    Args:
        target: the reference (fp32) target IR folder, which verifies the reference draft's blocks.
        drafts: weight format -> draft IR folder; must hold `REFERENCE_FORMAT`.
        pages, prompt, max_new_tokens, device: the run options (module docstring).

    Returns:
        Weight format -> `DraftAgreement`, for every format but the reference.
    """
    from utils.pipeline.vision import TextEmbeddings

    _require_reference(drafts, "drafts")
    loaded = {fmt: _Draft(Path(folder), device) for fmt, folder in drafts.items()}
    reference = loaded.pop(REFERENCE_FORMAT)
    info = reference.model.info
    proposer = _ComparingProposer(reference, loaded, TextEmbeddings(target, device, properties=F32_PROPERTIES),
                                  mask_token_id=info.mask_token_id, block_size=info.block_size)
    pipeline = SpeculativeOcrPipeline(target, device=device, precision="f32", proposer=proposer,
                                      block_size=info.block_size)
    for page in pages:
        pipeline.generate(page.image, prompt, max_new_tokens=max_new_tokens)
    return {fmt: DraftAgreement(blocks=int(blocks), positions=int(positions), top1=top1 / max(positions, 1),
                                walk=walk / max(positions, 1))
            for fmt, (blocks, positions, top1, walk) in proposer.counts.items()}


def _greedy_tokens(target: Path | str, pages: Sequence, *, prompt: str, max_new_tokens: int, device: str
                   ) -> list[list[int]]:
    pipeline = SpeculativeOcrPipeline(target, device=device, precision="f32")
    return [pipeline.generate(page.image, prompt, max_new_tokens=max_new_tokens).tokens for page in pages]


def _common_prefix(first: Sequence[int], second: Sequence[int]) -> int:
    length = 0
    while length < min(len(first), len(second)) and first[length] == second[length]:
        length += 1
    return length


def target_agreement(targets: Mapping[str, Path | str], pages: Sequence, *, prompt: str = DEFAULT_PROMPT,
                     max_new_tokens: int = 64, device: str = "CPU") -> dict[str, TargetAgreement]:
    """Greedy (target-only) answers of each target format against the reference target's, page by page.

    Args:
        targets: weight format -> target IR folder; must hold `REFERENCE_FORMAT`.
        pages, prompt, max_new_tokens, device: the run options (module docstring).

    Returns:
        Weight format -> `TargetAgreement`, for every format but the reference.
    """
    _require_reference(targets, "targets")
    answers = {fmt: _greedy_tokens(folder, pages, prompt=prompt, max_new_tokens=max_new_tokens, device=device)
               for fmt, folder in targets.items()}
    reference = answers.pop(REFERENCE_FORMAT)
    total = sum(len(tokens) for tokens in reference)
    return {fmt: TargetAgreement(
        pages=len(pages), equal_pages=sum(a == b for a, b in zip(reference, tokens)),
        prefix=sum(_common_prefix(a, b) for a, b in zip(reference, tokens)) / max(total, 1))
        for fmt, tokens in answers.items()}


def tokens_per_step(target: Path | str, drafts: Mapping[str, Path | str], pages: Sequence, *,
                    prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 64, device: str = "CPU") -> dict[str, float]:
    """Mean tokens per step of speculative decoding with `target` and each draft, pooled over the pages.

    Args:
        target: the target IR folder (the reference one, so only the draft changes).
        drafts: weight format -> draft IR folder.
        pages, prompt, max_new_tokens, device: the run options (module docstring).

    Returns:
        Weight format -> tokens per step (the prefill step included, as `GenerationMetrics` counts it).
    """
    result = {}
    for fmt, folder in drafts.items():
        pipeline = SpeculativeOcrPipeline(target, folder, device=device, precision="f32")
        steps = [step for page in pages
                 for step in pipeline.generate(page.image, prompt, max_new_tokens=max_new_tokens).metrics.steps]
        result[fmt] = mean_tokens_per_step(steps)
    return result


def time_per_token(targets: Mapping[str, Path | str], drafts: Mapping[str, Path | str], pages: Sequence, *,
                   prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 64, device: str = "CPU",
                   precision: str = "default", repeats: int = 3) -> list[dict]:
    """Milliseconds per generated token (decode phase, pages pooled) of each target format alone and of the
    reference target with each draft format; every pipeline reads one page untimed first, then the formats take
    turns, `repeats` times.

    Returns:
        One row per format: {"model", "format", "tokens per step" (of the last repeat: the device's precision may
        change it), "ms per token" (median), "min", "max"}.
    """
    import statistics

    if repeats < 1:
        raise ValueError(f"repeats={repeats} must be >= 1")
    reference = _require_reference(targets, "targets")
    pipelines = {("target", fmt): SpeculativeOcrPipeline(folder, device=device, precision=precision)
                 for fmt, folder in targets.items()}
    pipelines |= {("draft", fmt): SpeculativeOcrPipeline(reference, folder, device=device, precision=precision,
                                                         draft_precision=precision)
                  for fmt, folder in drafts.items()}
    for pipeline in pipelines.values():
        pipeline.generate(pages[0].image, prompt, max_new_tokens=max_new_tokens)
    times, steps = {key: [] for key in pipelines}, {}
    for _ in range(repeats):
        for key, pipeline in pipelines.items():
            runs = [pipeline.generate(page.image, prompt, max_new_tokens=max_new_tokens).metrics for page in pages]
            tokens = sum(max(run.num_generated_tokens - 1, 0) for run in runs)
            times[key].append(1000 * sum(run.decode_seconds for run in runs) / max(tokens, 1))
            steps[key] = mean_tokens_per_step([step for run in runs for step in run.steps])
    return [{"model": model, "format": fmt, "tokens per step": steps[(model, fmt)],
             "ms per token": statistics.median(values), "min": min(values), "max": max(values)}
            for (model, fmt), values in times.items()]


def compression_report(targets: Mapping[str, Path | str], drafts: Mapping[str, Path | str], pages: Sequence, *,
                       prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 64, device: str = "CPU"
                       ) -> CompressionReport:
    """Sizes, draft agreement, target text agreement and tokens per step, for every format given.

    Args:
        targets: weight format -> target IR folder; must hold `REFERENCE_FORMAT`.
        drafts: weight format -> draft IR folder; must hold `REFERENCE_FORMAT`.
        pages, prompt, max_new_tokens, device: the run options (module docstring).

    Returns:
        The `CompressionReport`; sizes of the target IRs first, then the draft's.
    """
    options = {"prompt": prompt, "max_new_tokens": max_new_tokens, "device": device}
    reference_target = _require_reference(targets, "targets")
    return CompressionReport(
        sizes=ir_sizes(targets) + ir_sizes(drafts),
        draft=draft_agreement(reference_target, drafts, pages, **options),
        target=target_agreement(targets, pages, **options),
        tokens_per_step=tokens_per_step(reference_target, drafts, pages, **options),
    )
