"""What weight compression costs and keeps: size on disk, draft agreement, target text, tokens per step.

Every run compiles with f32 inference precision (`F32_PROPERTIES`; this CPU defaults to bf16), so the
compressed weights are decompressed to f32 and any difference comes from the weights alone. Needs no torch.

- Sizes: bytes of each IR's weights file (`.bin`) per format; the `.xml` beside it holds the graph only.
- Draft agreement: the reference draft (fp32) drives speculative decoding with the reference target, and
  every other draft runs on exactly the same blocks (same anchor, same new context, its own context cache).
  `top1`: share of block positions whose draft-logit argmax equals the reference's; `walk`: share of the
  Markov walk's tokens (Top-K scorer) equal to the reference's.
- Target text: target-only greedy decoding of each format against the reference, page by page, with the first
  token where each differing page leaves the reference (`FirstDifference`); `target_agreements` runs several page
  sets on targets compiled once.
- Tokens per step: speculative decoding with the reference target and each draft, target and draft at f32, pooled
  over the pages (`speculative_runs` keeps each page's tokens and steps, so a caller can check the text is the
  target's own and pool any subset of the pages).
- `run_settings`: the caption line that names a table's pages, budget, confidence threshold and precision.
- Time per token (`time_per_token`, not part of the report: it is this machine's clock): ms per generated
  token of each target format alone and of speculative decoding with each draft format, median and range over
  repeats, at the precision asked for (the device's own by default, what users run).

Run options shared by the measurements: `pages` (`utils.pages.samples.SamplePage`s, or anything with `.image`),
`prompt` (the instruction after each page), `max_new_tokens` (token budget per page), `device` (OpenVINO),
`cache_dir` (OpenVINO's model cache, `utils.models.compiled_cache_dir`: a target compiled by one measurement is
imported by the next instead of compiled again; None compiles every time).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD
from utils.engine.device import F32_PROPERTIES
from utils.engine.proposal import Proposal
from utils.engine.verification import mean_tokens_per_step
from utils.export.compression import compressed_files
from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT
from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

__all__ = ["REFERENCE_FORMAT", "DraftAgreement", "FirstDifference", "TargetAgreement", "SpeculativeRun",
           "CompressionReport", "ir_sizes", "time_per_token", "draft_agreement", "first_difference",
           "target_agreements", "target_agreement", "speculative_runs", "tokens_per_step", "run_settings",
           "compression_report"]

REFERENCE_FORMAT = "fp32"


@dataclass(frozen=True)
class DraftAgreement:
    """A draft against the reference draft, on the same blocks."""

    blocks: int  # draft calls compared
    positions: int  # block positions compared (blocks x block size)
    top1: float  # share of positions with the reference's draft-logit argmax
    walk: float  # share of Markov-walk tokens equal to the reference's


@dataclass(frozen=True)
class FirstDifference:
    """Where a target's greedy answer first leaves the reference target's, on one page."""

    page: str  # the page's name
    position: int  # index of the first differing generated token (0: the first one)
    reference: str  # the reference's token there, as text ("" when its answer ended before)
    other: str  # this target's token there ("" when its answer ended before)
    before: str  # the text both wrote before it


@dataclass(frozen=True)
class TargetAgreement:
    """A target's greedy answers against the reference target's, on the same pages."""

    pages: int
    equal_pages: int  # pages whose tokens are identical
    prefix: float  # share of the reference's tokens before the first difference, pooled over the pages
    differences: tuple[FirstDifference, ...] = ()  # one per page that differs, in page order


@dataclass(frozen=True)
class SpeculativeRun:
    """Speculative decoding with one draft over the pages: what it wrote and how many tokens each step emitted."""

    tokens: tuple[tuple[int, ...], ...]  # per page, the generated tokens
    emitted: tuple[tuple[int, ...], ...]  # per page, tokens per step (accepted drafts + 1; the prefill step: 1)

    def tokens_per_step(self, pages: slice = slice(None)) -> float:
        """Mean tokens per step pooled over `pages` (all by default), the prefill step included."""
        steps = [count for page in self.emitted[pages] for count in page]
        return sum(steps) / len(steps) if steps else 0.0


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
                    prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 64, device: str = "CPU",
                    cache_dir: Path | str | None = None
                    ) -> dict[str, DraftAgreement]:
    """Top-1 and walk agreement of each draft with the reference draft, over the blocks of the sample pages.

    Args:
        target: the reference (fp32) target IR folder, which verifies the reference draft's blocks.
        drafts: weight format -> draft IR folder; must hold `REFERENCE_FORMAT`.
        pages, prompt, max_new_tokens, device, cache_dir: the run options (module docstring).

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
    pipeline = SpeculativeOcrPipeline(target, device=device, precision="f32", proposer=proposer, cache_dir=cache_dir,
                                      block_size=info.block_size)
    for page in pages:
        pipeline.generate(page.image, prompt, max_new_tokens=max_new_tokens)
    return {fmt: DraftAgreement(blocks=int(blocks), positions=int(positions), top1=top1 / max(positions, 1),
                                walk=walk / max(positions, 1))
            for fmt, (blocks, positions, top1, walk) in proposer.counts.items()}


def _common_prefix(first: Sequence[int], second: Sequence[int]) -> int:
    length = 0
    while length < min(len(first), len(second)) and first[length] == second[length]:
        length += 1
    return length


def first_difference(reference: Sequence[int], other: Sequence[int], token_text: Callable[[list[int]], str], *,
                     page: str) -> FirstDifference | None:
    """Where `other` first leaves `reference` (None when they are equal), its tokens written by `token_text`.

    Args:
        reference, other: the generated tokens of two answers to the same page.
        token_text: tokens -> text (special tokens written out), e.g. `SpeculativeOcrPipeline.token_text`.
        page: the page's name, kept in the result.
    """
    if list(reference) == list(other):
        return None
    position = _common_prefix(reference, other)

    def written(tokens: Sequence[int]) -> str:
        return token_text(list(tokens[position:position + 1])) if position < len(tokens) else ""

    return FirstDifference(page=page, position=position, reference=written(reference), other=written(other),
                           before=token_text(list(reference[:position])))


def _agreement(reference: list[list[int]], answers: list[list[int]], pages: Sequence,
               token_text: Callable[[list[int]], str]) -> TargetAgreement:
    differences = tuple(difference for page, a, b in zip(pages, reference, answers)
                        if (difference := first_difference(a, b, token_text, page=page.name)) is not None)
    total = sum(len(tokens) for tokens in reference)
    return TargetAgreement(pages=len(pages), equal_pages=len(pages) - len(differences),
                           prefix=sum(_common_prefix(a, b) for a, b in zip(reference, answers)) / max(total, 1),
                           differences=differences)


def target_agreements(targets: Mapping[str, Path | str], page_sets: Mapping[str, Sequence], *,
                      prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 64, device: str = "CPU",
                      cache_dir: Path | str | None = None
                      ) -> dict[str, dict[str, TargetAgreement]]:
    """`target_agreement` on several page sets, each target compiled once (compiling costs more than a page).

    Args:
        targets: weight format -> target IR folder; must hold `REFERENCE_FORMAT`.
        page_sets: a name -> the pages of that set.
        prompt, max_new_tokens, device: the run options (module docstring).

    Returns:
        Set name -> weight format -> `TargetAgreement`, for every format but the reference.
    """
    _require_reference(targets, "targets")
    answers, token_text = {}, None
    for fmt, folder in targets.items():
        pipeline = SpeculativeOcrPipeline(folder, device=device, precision="f32", cache_dir=cache_dir)
        answers[fmt] = {name: [pipeline.generate(page.image, prompt, max_new_tokens=max_new_tokens).tokens
                               for page in pages] for name, pages in page_sets.items()}
        token_text = pipeline.token_text if fmt == REFERENCE_FORMAT else token_text
    reference = answers.pop(REFERENCE_FORMAT)
    return {name: {fmt: _agreement(reference[name], answer[name], pages, token_text)
                   for fmt, answer in answers.items()}
            for name, pages in page_sets.items()}


def target_agreement(targets: Mapping[str, Path | str], pages: Sequence, *, prompt: str = DEFAULT_PROMPT,
                     max_new_tokens: int = 64, device: str = "CPU", cache_dir: Path | str | None = None
                     ) -> dict[str, TargetAgreement]:
    """Greedy (target-only) answers of each target format against the reference target's, page by page.

    Args:
        targets: weight format -> target IR folder; must hold `REFERENCE_FORMAT`.
        pages, prompt, max_new_tokens, device, cache_dir: the run options (module docstring).

    Returns:
        Weight format -> `TargetAgreement`, for every format but the reference.
    """
    return target_agreements(targets, {"pages": pages}, prompt=prompt, max_new_tokens=max_new_tokens,
                             device=device, cache_dir=cache_dir)["pages"]


def speculative_runs(target: Path | str, drafts: Mapping[str, Path | str | None], pages: Sequence, *,
                     prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 64,
                     confidence_threshold: float = DEFAULT_CONFIDENCE_THRESHOLD, device: str = "CPU",
                     cache_dir: Path | str | None = None) -> dict[str, SpeculativeRun]:
    """Speculative decoding with `target` and each draft at f32 (target and draft), page by page.

    Args:
        target: the target IR folder (the reference one, so only the draft changes).
        drafts: a name (the weight format) -> draft IR folder; None runs the target alone, one token a step (the
            text every draft's run must equal).
        pages, prompt, max_new_tokens, device, cache_dir: the run options (module docstring).
        confidence_threshold: verify only the leading drafts whose predicted acceptance reaches it (0: all).

    Returns:
        Name -> `SpeculativeRun`.
    """
    runs = {}
    for fmt, folder in drafts.items():
        pipeline = SpeculativeOcrPipeline(target, folder, device=device, precision="f32", draft_precision="f32",
                                          cache_dir=cache_dir)
        results = [pipeline.generate(page.image, prompt, max_new_tokens=max_new_tokens,
                                     confidence_threshold=confidence_threshold) for page in pages]
        runs[fmt] = SpeculativeRun(tokens=tuple(tuple(result.tokens) for result in results),
                                   emitted=tuple(tuple(step.accepted + 1 for step in result.metrics.steps)
                                                 for result in results))
    return runs


def tokens_per_step(target: Path | str, drafts: Mapping[str, Path | str], pages: Sequence, *,
                    prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 64, device: str = "CPU") -> dict[str, float]:
    """Mean tokens per step of speculative decoding with `target` and each draft, pooled over the pages.

    Args:
        target: the target IR folder (the reference one, so only the draft changes).
        drafts: weight format -> draft IR folder.
        pages, prompt, max_new_tokens, device, cache_dir: the run options (module docstring).

    Returns:
        Weight format -> tokens per step (the prefill step included, as `GenerationMetrics` counts it).
    """
    runs = speculative_runs(target, drafts, pages, prompt=prompt, max_new_tokens=max_new_tokens, device=device)
    return {fmt: run.tokens_per_step() for fmt, run in runs.items()}


def run_settings(pages: Sequence, *, max_new_tokens: int, precision: str = "f32",
                 confidence_threshold: float | None = DEFAULT_CONFIDENCE_THRESHOLD) -> str:
    """One line naming what a measurement ran on, for the caption of its table: pages, budget, threshold, precision.

    Args:
        pages: the pages read (their names are listed).
        max_new_tokens: the token budget per page.
        precision: the inference precision asked for ("f32", or "default": the device's own).
        confidence_threshold: the confidence threshold of the drafts verified; None when there is none (the target
            alone, or a loop that verifies every block whole).
    """
    threshold = ("no confidence threshold" if confidence_threshold is None
                 else f"confidence threshold {confidence_threshold:g}")
    inference = "f32 inference" if precision == "f32" else "the device's own inference precision"
    return (f"{len(pages)} page{'' if len(pages) == 1 else 's'} ({', '.join(page.name for page in pages)}), at most "
            f"{max_new_tokens} new tokens each, {threshold}, {inference}")


def time_per_token(targets: Mapping[str, Path | str], drafts: Mapping[str, Path | str], pages: Sequence, *,
                   prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 64, device: str = "CPU",
                   precision: str = "default", repeats: int = 3, cache_dir: Path | str | None = None) -> list[dict]:
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
    options = {"device": device, "precision": precision, "cache_dir": cache_dir}
    pipelines = {("target", fmt): SpeculativeOcrPipeline(folder, **options) for fmt, folder in targets.items()}
    pipelines |= {("draft", fmt): SpeculativeOcrPipeline(reference, folder, draft_precision=precision, **options)
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
        pages, prompt, max_new_tokens, device, cache_dir: the run options (module docstring).

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
