"""What a tiny pair shows a newcomer: how well it reads and drafts through the OpenVINO engine, as the CLI runs it.

Exports the pair to a temporary folder, then reads held-out generated pages (`utils.pages.reading_pages`,
rows no training page shows) with `SpeculativeOcrPipeline`:

- at the CLI's defaults: the device's default precision for target and draft (bf16 on a CPU with AMX or
  AVX-512 BF16), the default confidence threshold, the Top-K Markov scorer;
- at f32 with every draft verified (threshold 0), under each draft walk: the Top-K Markov scorer, the dense
  walk, and the per-position argmax of the block logits (Top-1: the Markov bias cannot change a lone candidate);
- target only, at both precisions: the reference each speculative run must (f32) or should (default) equal.

Then what shows whether it reads rather than recites, each at the CLI's defaults: held-out pages of uniformly random
printable ASCII (no language prior helps the target or the draft there), the pages written by hand for the test
(`utils.pages.written_pages`: code, tables, symbols, lists, ...), held-out pages with blank and short rows, the
pages whose reading repeats or skips a row, an image of another shape (a typewriter page of 3 rows of 16 characters
not padded to the one shape: the pipeline's notice, and where it stops), and one page of held-out rows in a font the
reader never saw (PIL's default font at 24 px, proportional, off the grid). The figures go into the shipped pair's
manifest (`utils.tiny.manifest`).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from utils.checkpoint.draft import LOCAL_TO_TARGET
from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD
from utils.evaluation.acceptance import confidence_auc, scored_positions
from utils.evaluation.character_error_rate import character_error_rate, row_slip
from utils.evaluation.glyph_confusion import glyph_confusion
from utils.evaluation.mechanisms import goal_lines, mechanism_figures
from utils.pages.hard_pages import DIGIT_GRID_PAGES, LOOK_ALIKE_PAGES_PER_SIZE, digit_grid_pages, look_alike_pages
from utils.pages.reading_pages import TRAINING_KINDS, ReadingPage, reading_pages
from utils.pages.typewriter import page_text, render_typewriter_page
from utils.pages.written_pages import written_pages

__all__ = ["READING_PAGES", "WALKS", "held_out_pages", "measure_reading", "read_hard_pages", "hard_pages_summary",
           "reading_report_summary", "reading_rows", "unseen_font_page", "another_shape_page"]

READING_PAGES = 40  # held-out generated pages read per setting
_OTHER_PAGES = 20  # held-out pages of random text, and of blank and short rows
WALKS = {"top_k_scorer": None, "dense_walk": 0, "argmax": 1}  # name -> markov_head_top_k


def held_out_pages(pages: int = READING_PAGES) -> tuple[list[ReadingPage], list[ReadingPage]]:
    """The held-out generated pages `measure_reading` reads, and its pages of uniformly random printable ASCII
    (`_OTHER_PAGES` of them; half as many as `pages` for a quick check of fewer than READING_PAGES)."""
    others = max(1, pages // 2) if pages < READING_PAGES else _OTHER_PAGES
    return (reading_pages(pages, seed=0, split="held-out"),
            reading_pages(others, seed=0, split="held-out", kinds=("random",)))


def unseen_font_page(*, seed: int = 0, size: int = 24) -> ReadingPage:
    """The rows of a held-out prose page drawn in PIL's default font (proportional, not on the typewriter grid): a
    font never trained on."""
    page = reading_pages(1, seed=seed, split="held-out", kinds=("prose",))[0]
    lines = [line.rstrip() for line in page.text.splitlines()]
    font = ImageFont.load_default(size=size)
    width = int(max(font.getlength(line) for line in lines)) + 2 * size
    image = Image.new("RGB", (width, int(len(lines) * size * 1.4) + size), "white")
    draw = ImageDraw.Draw(image)
    for index, line in enumerate(lines):
        draw.text((size, size // 2 + int(index * size * 1.4)), line, fill="black", font=font)
    return ReadingPage("unseen-font", "\n".join(lines), image)


def another_shape_page() -> ReadingPage:
    """Three rows of 16 characters drawn as they are, not padded to the one page shape: an image of another size."""
    lines = ["Meet at 4:15 pm.", "Room B-204", "Bring an ID card"]
    return ReadingPage("another-shape", page_text(lines), render_typewriter_page(lines))


def _read(pipeline, pages: Sequence[ReadingPage], **options) -> dict:
    """Reads every page with the pipeline's (and the CLI's) token budget; the texts, the CER, the pages whose
    reading repeats or skips a row, the steps' figures."""
    from utils.engine.verification import mean_tokens_per_step

    results = [pipeline.generate(page.image, **options) for page in pages]
    texts = [result.texts[0] for result in results]
    figures = {"cer": round(character_error_rate(zip(texts, (page.text for page in pages), strict=True)), 4),
               "distinct_answers": len(set(texts)),
               "row_slips": sum(row_slip(text, page.text) for text, page in zip(texts, pages, strict=True)),
               "reached_budget": sum(bool(result.tokens) and result.tokens[-1] not in pipeline.eos_token_ids
                                     for result in results),
               "texts": texts}
    if results[0].drafted:
        steps = [step for result in results for step in result.metrics.steps]
        scores, accepted = scored_positions(steps)
        auc = confidence_auc(scores, accepted)
        figures |= {"tokens_per_step": round(mean_tokens_per_step(steps), 4),
                    "confidence_auc": None if math.isnan(auc) else round(auc, 4),
                    "rejected_drafts": accepted.count(False)}  # what the AUC ranks against the accepted ones
    return figures


def read_hard_pages(pipeline, *, per_size: int = LOOK_ALIKE_PAGES_PER_SIZE, grids: int = DIGIT_GRID_PAGES) -> dict:
    """Reads the held-out look-alike pages (every glyph size) and digit grids (`utils.pages.hard_pages`) at the CLI's
    defaults: per kind the CER, tokens per step, row slips and readings that reached the budget, and for the
    look-alikes the accuracy of every look-alike class and the most frequent confusions."""
    look, grid = look_alike_pages(per_size), digit_grid_pages(grids)
    look_figures = _read(pipeline, look, confidence_threshold=DEFAULT_CONFIDENCE_THRESHOLD)
    confusion = glyph_confusion(zip(look_figures.pop("texts"), (page.text for page in look), strict=True))
    worst, accuracy = confusion.worst_class()
    grid_figures = _read(pipeline, grid, confidence_threshold=DEFAULT_CONFIDENCE_THRESHOLD)
    grid_figures.pop("texts")
    return {"look_alikes": look_figures | {
                "pages": len(look), "characters": confusion.characters(),
                "accuracy_by_class": {glyphs: round(value, 4) for glyphs, value in confusion.by_class().items()},
                "worst_class": worst, "worst_class_accuracy": round(accuracy, 4),
                "confusions": [list(item) for item in confusion.mistakes()[:12]]},
            "digit_grids": grid_figures | {"pages": len(grid)}}


def hard_pages_summary(figures: dict) -> str:
    """`read_hard_pages`' figures in a few lines."""
    look, grid = figures["look_alikes"], figures["digit_grids"]
    confusions = ", ".join(f"{page!r}->{read!r} x{times}" for page, read, times in look["confusions"][:6]) or "none"
    return (f"    look-alike glyphs ({look['pages']} pages, {look['characters']} look-alike characters): worst class "
            f"{look['worst_class']!r} read right {look['worst_class_accuracy']:.1%}, CER {look['cer']:.1%}, "
            f"{look['tokens_per_step']:.2f} tokens per step; confusions: {confusions}\n"
            f"    digit grids ({grid['pages']} pages): CER {grid['cer']:.1%}, {grid['tokens_per_step']:.2f} tokens per "
            f"step, {grid['reached_budget']} reached the budget, {grid['row_slips']} repeat or skip a row")


def measure_reading(root: Path | str, *, pages: int = READING_PAGES, device: str = "CPU") -> dict:
    """Reads held-out pages with the pair in `root` (`target/`, `draft/`) through OpenVINO, in every setting above.

    Args:
        root: a tiny pair folder.
        pages: held-out generated pages per setting; fewer than READING_PAGES (a quick check) also reads fewer
            random, sparse and hand-written pages (half as many).
        device: the OpenVINO device.

    Returns:
        JSON-ready figures: per setting the CER, distinct answers, tokens per step (speculative runs), confidence
        AUC; the agreement between precisions; the unseen-font CER; the precision the device really ran; the
        target's own f32 readings of the held-out pages and of the random ones (`target_only.f32.readings` and
        `random_readings`, in page order).
    """
    from utils.export.draft import export_draft
    from utils.export.target import export_target
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    root = Path(root)
    (held_out, random_pages), unseen_page = held_out_pages(pages), unseen_font_page()
    others = len(random_pages)
    sparse_pages = reading_pages(others, seed=0, split="held-out", kinds=TRAINING_KINDS, sparse_share=1.0)
    with tempfile.TemporaryDirectory() as folder:
        draft = export_draft(root / "draft", Path(folder) / "draft")
        target = export_target(root / "target", Path(folder) / "target", draft=root / "draft")
        exact = SpeculativeOcrPipeline(target, draft, device=device, precision="f32", draft_precision="f32")
        default = SpeculativeOcrPipeline(target, draft, device=device)
        exact_alone = SpeculativeOcrPipeline(target, device=device, precision="f32")
        default_alone = SpeculativeOcrPipeline(target, device=device)
        cli = _read(default, held_out, confidence_threshold=DEFAULT_CONFIDENCE_THRESHOLD)
        walks = {name: _read(exact, held_out, confidence_threshold=0.0, markov_head_top_k=top_k)
                 for name, top_k in WALKS.items()}
        alone = {"f32": _read(exact_alone, held_out), "default": _read(default_alone, held_out)}
        random_alone = _read(exact_alone, random_pages)["texts"]
        unseen = _read(default, [unseen_page], confidence_threshold=DEFAULT_CONFIDENCE_THRESHOLD)
        written = written_pages() if pages >= READING_PAGES else written_pages()[:others]
        unpredictable = {
            "random": _read(default, random_pages, confidence_threshold=DEFAULT_CONFIDENCE_THRESHOLD),
            "written": _read(default, written, confidence_threshold=DEFAULT_CONFIDENCE_THRESHOLD),
            "sparse": _read(default, sparse_pages, confidence_threshold=DEFAULT_CONFIDENCE_THRESHOLD)}
        hard = (read_hard_pages(default) if pages >= READING_PAGES
                else read_hard_pages(default, per_size=1, grids=others))
        shape_page = another_shape_page()
        shape = default.generate(shape_page.image, confidence_threshold=DEFAULT_CONFIDENCE_THRESHOLD)
        precision = default.inference_precision
        vocabulary = json.loads((root / "draft" / LOCAL_TO_TARGET).read_text())
        mechanisms = mechanism_figures(default, held_out + written, vocabulary)
    truth_f32 = alone["f32"].pop("texts")
    truth_default = alone["default"].pop("texts")
    alone["f32"]["readings"] = truth_f32  # the one reading every CPU must give: what a test reads again
    alone["f32"]["random_readings"] = random_alone  # random strings, where even a good reader slips now and then
    cli_texts = cli.pop("texts")
    return {
        "pages": pages, "split": "held-out", "device": device, "default_precision": precision,
        "cli_defaults": cli | {"confidence_threshold": DEFAULT_CONFIDENCE_THRESHOLD},
        "f32_every_draft_verified": {name: {key: value for key, value in figures.items() if key != "texts"}
                                     for name, figures in walks.items()},
        "target_only": alone,
        "speculative_equals_target_only_at_f32": sum(
            figures["texts"] == truth_f32 for figures in walks.values()) == len(walks),
        "pages_equal_at_default_and_f32": sum(a == b for a, b in zip(cli_texts, truth_f32, strict=True)),
        "speculative_differs_from_target_only_at_default": sum(
            a != b for a, b in zip(cli_texts, truth_default, strict=True)),
        "unseen_font": {"rows": len(unseen_page.text.splitlines()), "cer": unseen["cer"],
                        "reading": unseen["texts"][0]},
        "random_pages": {key: value for key, value in unpredictable["random"].items() if key != "texts"}
        | {"pages": len(random_pages)},
        "sparse_pages": {key: value for key, value in unpredictable["sparse"].items() if key != "texts"}
        | {"pages": len(sparse_pages)},
        "written_pages": {key: value for key, value in unpredictable["written"].items() if key != "texts"}
        | {"readings": dict(zip((page.name for page in written), unpredictable["written"]["texts"], strict=True)),
           "cer_by_page": {page.name: round(character_error_rate([(text, page.text)]), 4)
                           for page, text in zip(written, unpredictable["written"]["texts"], strict=True)}},
        "hard_pages": hard,
        "another_shape": {"image_size": list(shape_page.image.size), "notice": shape.notice,
                          "tokens": shape.metrics.num_generated_tokens, "reading": shape.texts[0],
                          "cer": round(character_error_rate([(shape.texts[0], shape_page.text)]), 4)},
        "mechanisms": mechanisms,
    }


def _page_kinds(figures: dict) -> list[tuple[str, dict, int]]:
    """(kind of page, its figures at the CLI's defaults, pages read), the held-out generated pages first."""
    return [("held-out generated pages (7 kinds)", figures["cli_defaults"], figures["pages"]),
            ("random printable ASCII", figures["random_pages"], figures["random_pages"]["pages"]),
            ("pages written by hand", figures["written_pages"], len(figures["written_pages"]["readings"])),
            ("blank and short rows", figures["sparse_pages"], figures["sparse_pages"]["pages"])]


def reading_rows(figures: dict) -> list[dict]:
    """`measure_reading`'s figures at the CLI's defaults, one row per kind of page: what notebook 01 tabulates."""
    return [{"pages": what, "count": count, "CER": f"{part['cer']:.1%}",
             "tokens per step": f"{part['tokens_per_step']:.2f}", "pages repeating or skipping a row": part["row_slips"]}
            for what, part, count in _page_kinds(figures)]


def reading_report_summary(figures: dict) -> str:
    """`measure_reading`'s figures in a few lines."""
    cli, walks = figures["cli_defaults"], figures["f32_every_draft_verified"]
    pages = figures["pages"]
    lines = [f"  reading {pages} held-out pages through OpenVINO (default precision: {figures['default_precision']}):",
             f"    CLI defaults: CER {cli['cer']:.1%}, {cli['distinct_answers']} distinct answers, "
             f"{cli['tokens_per_step']:.2f} tokens per step",
             f"    same answer at the default precision and f32: {figures['pages_equal_at_default_and_f32']} of {pages}"]
    lines += [f"    f32, every draft verified, {name}: {walk['tokens_per_step']:.2f} tokens per step, "
              f"confidence AUC {walk['confidence_auc']} ({walk['rejected_drafts']} drafts rejected)"
              for name, walk in walks.items()]
    lines.append(f"    held-out pages repeating or skipping a row: {cli['row_slips']} of {pages}")
    for what, part, count in _page_kinds(figures)[1:]:
        lines.append(f"    {what}: CER {part['cer']:.1%}, {part['tokens_per_step']:.2f} tokens per step, "
                     f"{part['row_slips']} of {count} pages repeating or skipping a row")
    lines.append(hard_pages_summary(figures["hard_pages"]))
    shape = figures["another_shape"]
    lines.append(f"    an image of another shape ({shape['image_size'][0]} x {shape['image_size'][1]} px): "
                 f"{shape['tokens']} tokens, notice: {'yes' if shape['notice'] else 'NO'}")
    lines.append(f"    a font never trained on (PIL's default, 24 px): CER {figures['unseen_font']['cer']:.1%}")
    if "mechanisms" in figures:  # manifests written before they were measured have none
        measured = figures["mechanisms"]["pages"]
        lines.append(f"    DSpark's mechanisms on the held-out and hand-written pages ({measured}):")
        lines += [f"      {line}" for line in goal_lines(figures["mechanisms"]["summary"])]
    return "\n".join(lines)
