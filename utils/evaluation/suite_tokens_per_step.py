"""Every tokens-per-step figure the suite prints for the shipped pair, re-run side by side in one place.

The notebooks print the tokens per step of one draft in several settings: other pages, another token budget,
another confidence threshold, another precision, a PyTorch reference instead of OpenVINO. Each figure is right for
its setting. `SUITE_SETTINGS` names where each is printed and what it runs with; `read_settings` reads each setting
again with one OpenVINO pipeline at f32 (so the figures are the same on every machine), and gives each with the
prefill's token counted, as the notebooks count it, and without it (the decode phase alone).

The settings mirror the notebooks' cells: a notebook that changes what it reads must change its entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD
from utils.engine.verification import StepRecord
from utils.evaluation.page_choice import first_reading, read_exactly
from utils.pages.reading_pages import SAMPLE_PAGE_COUNT
from utils.pages.typewriter import PAGE_CELLS
from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT

__all__ = ["FigureSetting", "SUITE_SETTINGS", "tokens_per_step", "read_settings", "table_rows", "by_page",
           "prefill_gain", "setting_notes"]

_BUDGET = 512  # `SpeculativeOcrPipeline.generate`'s default token budget (a typewriter page stops before it)


@dataclass(frozen=True)
class FigureSetting:
    """Where a notebook prints a tokens-per-step figure, and the settings of the readings behind it."""

    notebook: str  # the notebook's file name
    section: str  # the heading of the section that prints it
    pages: int  # how many of the suite's pages, from `first`
    max_new_tokens: int
    confidence_threshold: float
    precision: str  # what the notebook runs the target and the draft at
    first_read_exactly: bool = False  # only the first of those pages whose reading has no error (05's choice)
    first: int = 0  # 0: from the first sample page; `SAMPLE_PAGE_COUNT`: from the first unpredictable page

    @property
    def where(self) -> str:
        """A Markdown link to the section."""
        return f"[{self.notebook[:2]}: {self.section}]({self.notebook}#{self.section.replace(' ', '-')})"

    @property
    def label(self) -> str:
        """The notebook's number and the section, as plain text."""
        return f"{self.notebook[:2]} ({self.section})"

    @property
    def page_set(self) -> str:
        if self.first_read_exactly:
            return "the first sample page read without an error"
        samples = max(0, min(self.first + self.pages, SAMPLE_PAGE_COUNT) - self.first)
        others = self.pages - samples
        if not others:
            return "the first sample page" if self.pages == 1 else f"the first {self.pages} sample pages"
        return (f"the {others} unpredictable pages" if not samples
                else f"the {samples} sample pages and {others} unpredictable")


_DEFAULT = DEFAULT_CONFIDENCE_THRESHOLD
SUITE_SETTINGS = (
    FigureSetting("01-setup.ipynb", "Open the tiny model pair", 10, PAGE_CELLS, 0.0,
                  "f32, the PyTorch reference at the build (the manifest)"),
    FigureSetting("01-setup.ipynb", "Read a page now", 1, _BUDGET, _DEFAULT, "target f32, draft at the device's own"),
    FigureSetting("02-export-target-and-draft.ipynb", "Check the exported folders", 1, 32, _DEFAULT, "f32"),
    FigureSetting("04-compress-weights.ipynb", "Time a token in each format", 2, 32, _DEFAULT, "the device's own"),
    FigureSetting("04-compress-weights.ipynb", "Measure tokens per step per draft format", 4, 32, _DEFAULT, "f32"),
    FigureSetting("05-speculative-ocr.ipynb", "Compare the two runs", 10, _BUDGET, _DEFAULT,
                  "f32 (the precision widget's first choice)", first_read_exactly=True),
    FigureSetting("06-acceptance-plots.ipynb", "Read what every machine measures alike", 4, PAGE_CELLS, 0.0,
                  "f32 (the precision widget's first choice)", first=SAMPLE_PAGE_COUNT),
    FigureSetting("07-inside-one-step.ipynb", "See what each drafting choice adds", 14, _BUDGET, 0.0, "f32"),
    FigureSetting("07-inside-one-step.ipynb", "See what each drafting choice adds", 14, _BUDGET, _DEFAULT, "f32"),
)


def tokens_per_step(runs: Sequence[Sequence[StepRecord]]) -> tuple[float, float]:
    """(with the prefill, without it) over the steps of several readings pooled: tokens emitted per step, the
    first step of each reading being its prefill (one token)."""
    steps = sum(len(run) for run in runs)
    tokens = sum(len(step.emitted) for run in runs for step in run)
    if steps <= len(runs):
        raise ValueError(f"{len(runs)} readings of {steps} steps have no decode step")
    return tokens / steps, (tokens - len(runs)) / (steps - len(runs))


def read_settings(pipeline, pages: Sequence, settings: Sequence[FigureSetting] = SUITE_SETTINGS, *,
                  prompt: str = DEFAULT_PROMPT, progress: Callable | None = None) -> list[dict]:
    """Reads every setting with one pipeline and returns one row per setting, in the order given.

    A page is read once per budget and threshold, shared by the settings that need it; and a reading that ended
    with the end-of-text token within a smaller budget is that budget's reading too (the budget never stopped it),
    so the settings are read from the largest budget down.

    Args:
        pipeline: a `SpeculativeOcrPipeline` with the draft, at f32 for figures the same on every machine.
        pages: the suite's pages in order: `[*sample_pages(), *unpredictable_sample_pages()]`.
        progress: wraps the settings' iterable (for example `tqdm.auto.tqdm`), or None.

    Returns:
        One dict per setting: "setting", "pages" (names), "tokens", "steps", "with prefill", "without prefill",
        "runs" (each reading's steps).
    """
    cache: dict[tuple, tuple[str, list[StepRecord]]] = {}
    ended: dict[tuple, tuple[int, tuple[str, list[StepRecord]]]] = {}  # (page, threshold) -> (tokens, reading)

    def read(page, setting: FigureSetting) -> tuple[str, list[StepRecord]]:
        key = (page.name, setting.max_new_tokens, setting.confidence_threshold)
        shorter = ended.get((page.name, setting.confidence_threshold))
        if key not in cache and shorter is not None and shorter[0] <= setting.max_new_tokens:
            cache[key] = shorter[1]
        if key not in cache:
            result = pipeline.generate(page.image, prompt, max_new_tokens=setting.max_new_tokens,
                                       confidence_threshold=setting.confidence_threshold)
            cache[key] = (result.texts[0], result.metrics.steps)
            if result.tokens and result.tokens[-1] in pipeline.eos_token_ids:
                ended.setdefault((page.name, setting.confidence_threshold), (len(result.tokens), cache[key]))
        return cache[key]

    rows = {}
    ordered = sorted(settings, key=lambda setting: -setting.max_new_tokens)
    for setting in progress(ordered) if progress else ordered:
        chosen = list(pages[setting.first:setting.first + setting.pages])
        if setting.first_read_exactly:
            chosen = [first_reading(chosen, lambda page, setting=setting: read(page, setting),
                                    lambda page, reading: read_exactly(reading[0], page),
                                    what="is read without an error")[1]]
        runs = [read(page, setting)[1] for page in chosen]
        with_prefill, without = tokens_per_step(runs)
        rows[setting] = {"setting": setting, "pages": [page.name for page in chosen],
                         "tokens": sum(len(step.emitted) for run in runs for step in run),
                         "steps": sum(len(run) for run in runs), "with prefill": with_prefill,
                         "without prefill": without, "runs": runs}
    return [rows[setting] for setting in settings]


def table_rows(rows: Sequence[dict]) -> list[dict]:
    """`read_settings` rows as the columns of a table: where, the settings, and both figures."""
    return [{"printed in": row["setting"].where,
             "pages": row["setting"].page_set + (f" ({', '.join(row['pages'])})" if len(row["pages"]) <= 2 else ""),
             "token budget": row["setting"].max_new_tokens, "threshold": row["setting"].confidence_threshold,
             "precision there": row["setting"].precision, "tokens / steps": f"{row['tokens']} / {row['steps']}",
             "tokens per step": f"{row['with prefill']:.2f}", "without the prefill": f"{row['without prefill']:.2f}"}
            for row in rows]


def by_page(row: dict) -> dict[str, float]:
    """The tokens per step (the prefill counted) of each page of one `read_settings` row."""
    return {name: tokens_per_step([run])[0] for name, run in zip(row["pages"], row["runs"], strict=True)}


def prefill_gain(rows: Sequence[dict]) -> dict[int, tuple[float, float]]:
    """{token budget: (least, most)} that leaving the prefill out adds to the tokens per step of the rows read with
    that budget: the prefill is one token for one step per reading, so it weighs most on short readings."""
    gains: dict[int, list[float]] = {}
    for row in rows:
        gains.setdefault(row["setting"].max_new_tokens, []).append(row["without prefill"] - row["with prefill"])
    return {budget: (min(values), max(values)) for budget, values in sorted(gains.items())}


_ATTRIBUTES = {"page set": lambda row: tuple(row["pages"]), "token budget": lambda row: row["setting"].max_new_tokens,
               "threshold": lambda row: row["setting"].confidence_threshold}


def _label(row: dict) -> str:
    return row["setting"].label


def _value(name: str, row: dict) -> str:
    if name != "page set":
        return str(_ATTRIBUTES[name](row))
    pages = row["pages"]
    return ", ".join(pages) if len(pages) <= 2 else f"{len(pages)} pages"


def setting_notes(rows: Sequence[dict]) -> list[str]:
    """A sentence for each pair of `read_settings` rows that read with at most one setting apart (the page set, the
    token budget or the threshold): which one, and the two tokens-per-step figures. A row that reads exactly as an
    earlier one is said to once, and left out of the other pairs (they would repeat the earlier row's)."""
    notes, kept = [], []
    for row in rows:
        same = next((earlier for earlier in kept
                     if all(key(earlier) == key(row) for key in _ATTRIBUTES.values())), None)
        if same is not None:
            notes.append(f"{_label(same)} and {_label(row)} read the same pages with the same budget and threshold: "
                         f"{row['with prefill']:.2f} tokens per step here at f32; there, at "
                         f"{same['setting'].precision} and {row['setting'].precision}")
            continue
        kept.append(row)
    for index, a in enumerate(kept):
        for b in kept[index + 1:]:
            differ = [name for name, key in _ATTRIBUTES.items() if key(a) != key(b)]
            if len(differ) == 1:
                name = differ[0]
                notes.append(f"only the {name} differs between {_label(a)} and {_label(b)} ({_value(name, a)} vs "
                             f"{_value(name, b)}): {a['with prefill']:.2f} vs {b['with prefill']:.2f} tokens per step")
    return notes
