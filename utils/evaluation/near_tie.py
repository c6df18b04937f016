"""Why a reduced precision changes a token, measured: the target's top-2 margins against the change a reduced
precision makes to them, and a page built to sit on a near-tie.

Greedy decoding writes the target's best token. Where its lead over the second (the **top-2 margin**, in logits)
is smaller than what a rounding change moves that lead by, the two swap and the text differs from there on.
`margin_study` measures both along texts the reference wrote: the reference's margin at every position, and how
much a reduced-precision pipeline (`utils.evaluation.rounded_weights`) changes it there. `find_near_tie` builds an
input whose margin is below that change: one character cell of a typewriter page drawn as a blend
`alpha * glyph_a + (1 - alpha) * glyph_b` of two look-alike glyphs, alpha found by bisection so that the
reference's margin is about half the reduced precision's change and of the opposite sign. Then the reference and
the reduced precision write different tokens there.

Shape symbols: N tokens of a text, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
from PIL import Image

from utils.pages.typewriter import CELL, GLYPHS, render_typewriter_page

__all__ = ["next_token_logits", "teacher_forced_logits", "top2", "MarginStudy", "margin_study", "ordered_dither",
           "blend_pages", "look_alike", "bisect", "NearTie", "find_near_tie", "cell_strip", "plot_margins"]


def teacher_forced_logits(pipeline, image, prompt: str, tokens: Sequence[int]) -> np.ndarray:
    """The target's logits [N, V] for each token of `tokens` given the page, the prompt and the tokens before it.

    Row i scores token i: the prompt's last logits, then one verification block after another over `tokens`, each
    kept whole (`verify` + `accept`), so the text is read once, as written, whoever wrote it.

    Args:
        pipeline: a `SpeculativeOcrPipeline` (its language model; any draft is not used).
        tokens: a text, e.g. what the target wrote.
    """
    session = pipeline.language_model
    session.reset()
    last, _ = session.prefill(pipeline.prompt_embeddings(image, prompt))
    rows = [last[None]]
    if len(tokens) > 1:
        embeds = pipeline.embed(np.asarray([tokens[:-1]], np.int64))[0]
        for start in range(0, len(embeds), session.verify_length):
            logits, _ = session.verify(embeds[start:start + session.verify_length])
            session.accept(len(logits))
            rows.append(logits)
    return np.concatenate(rows)[:len(tokens)]


def next_token_logits(pipeline, image, prompt: str, prefix: Sequence[int]) -> np.ndarray:
    """The target's logits [V] for the token after `prefix` (teacher-forced, as `teacher_forced_logits`)."""
    return teacher_forced_logits(pipeline, image, prompt, [*prefix, 0])[-1]


def top2(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(best token, second token, best logit minus second) of each row of `logits` [..., V]."""
    order = np.argsort(logits, axis=-1)
    best, second = order[..., -1], order[..., -2]
    margin = np.take_along_axis(logits, best[..., None], -1)[..., 0] - np.take_along_axis(logits, second[..., None],
                                                                                          -1)[..., 0]
    return best, second, margin


@dataclass(frozen=True)
class MarginStudy:
    """The reference's top-2 margins along its own texts, and what a reduced precision does to them.

    One entry per token position of every text (arrays of length N over all texts).
    """

    cases: np.ndarray  # name of the case of each position
    positions: np.ndarray  # index of the token in its text
    tokens: np.ndarray  # the text's token (the reference's best when `greedy`)
    runners_up: np.ndarray  # the reference's second-best token there
    margins: np.ndarray  # reference logit of the token minus that of the runner-up
    changes: np.ndarray  # the reduced precision's margin of the same two tokens, minus `margins`
    reduced_best: np.ndarray  # the reduced precision's best token there

    @property
    def greedy(self) -> bool:
        """Whether every text is the reference's greedy text: its best token at every position."""
        return bool((self.margins > 0).all())

    @property
    def flips(self) -> int:
        """Positions where the reduced precision's best token is not the text's."""
        return int((self.reduced_best != self.tokens).sum())

    def tightest(self, count: int) -> list[int]:
        """Indices of the `count` smallest margins, smallest first."""
        return np.argsort(self.margins, kind="stable")[:count].tolist()


def margin_study(reference, reduced, cases: Sequence[tuple[str, object, Sequence[int]]], *, prompt: str
                 ) -> MarginStudy:
    """Measures, at every position of each text, the reference's top-2 margin and the reduced precision's change
    of it (the same two tokens' logit gap in the reduced pipeline, minus the reference's).

    Args:
        reference: a target pipeline at f32.
        reduced: the same target at a reduced precision (`utils.evaluation.rounded_weights`).
        cases: (name, image, tokens): the texts to measure along, e.g. what the reference wrote.
        prompt: the instruction after each image.
    """
    columns: dict[str, list] = {key: [] for key in ("cases", "positions", "tokens", "runners_up", "margins",
                                                    "changes", "reduced_best")}
    for name, image, tokens in cases:
        tokens = np.asarray(tokens, np.int64)
        exact = teacher_forced_logits(reference, image, prompt, tokens)
        rounded = teacher_forced_logits(reduced, image, prompt, tokens)
        masked = exact.copy()
        masked[np.arange(len(tokens)), tokens] = -np.inf
        runners_up = masked.argmax(-1)
        index = np.arange(len(tokens))
        margins = exact[index, tokens] - exact[index, runners_up]
        columns["cases"].append(np.full(len(tokens), name, dtype=object))
        columns["positions"].append(index)
        columns["tokens"].append(tokens)
        columns["runners_up"].append(runners_up)
        columns["margins"].append(margins)
        columns["changes"].append(rounded[index, tokens] - rounded[index, runners_up] - margins)
        columns["reduced_best"].append(rounded.argmax(-1))
    return MarginStudy(**{key: np.concatenate(values) for key, values in columns.items()})


@cache
def _bayer(size: int) -> np.ndarray:
    """The Bayer index matrix [size, size] (size a power of two): every value 0 .. size² - 1 once, spread out."""
    matrix = np.zeros((1, 1), np.int64)
    while len(matrix) < size:
        matrix = np.block([[4 * matrix, 4 * matrix + 2], [4 * matrix + 3, 4 * matrix + 1]])
    return matrix


def ordered_dither(shape: tuple[int, int], *, size: int = 16) -> np.ndarray:
    """Thresholds [H, W] in (0, 1) of an ordered dither (a tiled `size` x `size` Bayer matrix).

    Rounding a blend of two images to grey levels with these thresholds moves each pixel to its next level at
    its own alpha, so a small change of alpha changes a few pixels by one level, not all of them at once.
    """
    tile = (_bayer(size) + 0.5) / size ** 2
    reps = (-(-shape[0] // size), -(-shape[1] // size))
    return np.tile(tile, reps)[:shape[0], :shape[1]]


def blend_pages(page_a: Image.Image, page_b: Image.Image, alpha: float) -> Image.Image:
    """`alpha * page_a + (1 - alpha) * page_b`, rounded to 8-bit grey levels with `ordered_dither`.

    Where the two pages agree the result is that page exactly; alpha 1 gives `page_a`, alpha 0 `page_b`.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha={alpha} must be in [0, 1]")
    a, b = (np.asarray(page, np.float64) for page in (page_a, page_b))
    if a.shape != b.shape:
        raise ValueError(f"the pages differ in size: {a.shape} and {b.shape}")
    threshold = ordered_dither(a.shape[:2])
    threshold = threshold[..., None] if a.ndim == 3 else threshold
    mixed = np.floor(alpha * a + (1.0 - alpha) * b + threshold)
    return Image.fromarray(np.clip(mixed, 0, 255).astype(np.uint8), mode=page_a.mode)


@cache
def _glyph_cells() -> dict[str, np.ndarray]:
    """Each glyph's cell as drawn on a page (ink coverage, 0 = paper)."""
    return {char: 255.0 - np.asarray(render_typewriter_page([char]).convert("L"), np.float32)[:, :CELL]
            for char in GLYPHS}


def look_alike(char: str) -> str:
    """The glyph that looks most like `char`'s: the smallest sum of absolute pixel differences in its cell."""
    cells = _glyph_cells()
    if char not in cells:
        raise ValueError(f"{char!r} has no glyph; the typewriter draws {GLYPHS!r}")
    return min((other for other in GLYPHS if other != char),
               key=lambda other: (float(np.abs(cells[other] - cells[char]).sum()), other))


def bisect(function: Callable[[float], float], low: float, high: float, *, target: float = 0.0,
           tolerance: float = 0.0, steps: int = 40, ends: tuple[float, float] | None = None) -> tuple[float, float]:
    """An x between `low` and `high` where `function(x)` is within `tolerance` of `target` (or the closest of
    the points tried after `steps` cuts), and `function(x)`.

    `function(low) - target` and `function(high) - target` must have opposite signs. Each step cuts the interval
    where the line through its ends crosses the target (false position, Illinois variant: the end that stays
    twice in a row counts half, so the cut never stalls) and keeps the part with the sign change; the function
    need not be continuous (a page rounded to grey levels is not).

    Args:
        ends: `function(low)` and `function(high)`, when known (saves two calls).

    Raises:
        ValueError: the ends do not bracket the target.
    """
    f_low, f_high = ends if ends is not None else (function(low), function(high))
    f_low, f_high = f_low - target, f_high - target
    if f_low * f_high > 0:
        raise ValueError(f"the ends do not bracket the target: f({low}) - target = {f_low:.4g}, "
                         f"f({high}) - target = {f_high:.4g}")
    tried = [(abs(f_low), low, f_low), (abs(f_high), high, f_high)]
    kept = 0  # +1: the low end stayed last step, -1: the high end
    for _ in range(steps):
        if f_low == f_high or high - low <= 1e-9:
            break
        x = min(max(low + (high - low) * f_low / (f_low - f_high), low), high)
        value = function(x) - target
        tried.append((abs(value), x, value))
        if abs(value) <= tolerance:
            break
        if (value < 0) == (f_low < 0):
            low, f_low = x, value
            f_high, kept = (f_high / 2, -1) if kept == -1 else (f_high, -1)
        else:
            high, f_high = x, value
            f_low, kept = (f_low / 2, 1) if kept == 1 else (f_low, 1)
    _, x, value = min(tried, key=lambda item: item[0])
    return x, value + target


@dataclass(frozen=True)
class NearTie:
    """A page whose reading sits on a near-tie: at `position` the reference writes `winner` by `margin` logits
    over `runner_up`, and the reduced precision changes that margin by `change` (< -margin: it writes
    `runner_up`)."""

    image: Image.Image
    lines: tuple[str, ...]
    cell: tuple[int, int]  # (row, column) of the blended cell
    glyphs: tuple[str, str]  # (glyph a, glyph b) of alpha * a + (1 - alpha) * b
    alpha: float
    position: int  # index of the token in the reference's text
    prefix: tuple[int, ...]  # the reference's text before it
    winner: int  # the reference's token there
    runner_up: int  # its second, the reduced precision's token there
    margin: float  # reference: logit of winner minus logit of runner-up, > 0
    change: float  # reduced precision's margin of the same two tokens minus `margin`, < -margin
    cells_tried: int  # cells the search looked at, this one included


def _with_char(lines: Sequence[str], row: int, column: int, char: str) -> list[str]:
    return [line if index != row else line[:column] + char + line[column + 1:] for index, line in enumerate(lines)]


def find_near_tie(reference, reduced, reader, lines: Sequence[str], *, prompt: str, min_change: float,
                  share: float = 0.5, tolerance: float = 0.2, max_cells: int = 40) -> NearTie:
    """Builds a page on which `reference` and `reduced` write different tokens: the first cell, in reading order,
    where drawing its glyph's look-alike instead makes the reference write something else, and where the reduced
    precision moves the reference's margin between the two by at least `min_change`; its glyph blended with the
    look-alike, alpha chosen by bisection so that the reference's margin is `share` of that move, of the opposite
    sign.

    Args:
        reference: the target at f32 (the text the margins are measured on).
        reduced: the same target at a reduced precision.
        reader: a pipeline that writes the reference's text (the reference itself, or speculative decoding at f32,
            which writes the same, faster).
        lines: the rows of a typewriter page.
        min_change: the smallest move of the margin to accept, in logits: well above f32 rounding noise, so that
            the flip holds on every machine.
        share: the reference's margin as a share of the move (0.5: each side of the tie by half of it).
        tolerance: the accepted error of that share.
        max_cells: cells to try before giving up.

    Raises:
        ValueError: no cell within `max_cells` qualifies.
    """
    page = render_typewriter_page(list(lines))
    text = reader.generate(page, prompt).tokens
    pieces = [reader.token_text([token]) for token in text]
    starts = np.cumsum([0] + [len(piece) for piece in pieces])  # each token's first character
    # where each row starts in the reading: its rows as written (padded to the page's width, or not)
    row_starts = np.cumsum([0] + [len(row) + 1 for row in "".join(pieces).split("\n")])
    tried = 0
    cells = ((row, column) for row, line in enumerate(lines) for column, char in enumerate(line) if char != " ")
    for row, column in cells:
        if tried == max_cells:
            break
        tried += 1
        glyph, other = lines[row][column], look_alike(lines[row][column])
        if row >= len(row_starts) - 1:
            continue  # the reader wrote no such row
        position = int(np.searchsorted(starts, row_starts[row] + column, side="right")) - 1
        if position >= len(text) or glyph not in pieces[position]:
            continue  # the reader did not write this glyph here
        prefix, token_a = text[:position], text[position]
        page_b = render_typewriter_page(_with_char(lines, row, column, other))
        token_b = int(next_token_logits(reference, page_b, prompt, prefix).argmax())
        if token_b == token_a:
            continue  # the look-alike is read as the glyph itself

        def logits(pipeline, alpha):
            return next_token_logits(pipeline, blend_pages(page, page_b, alpha), prompt, prefix)

        def gap(pipeline, alpha):
            scores = logits(pipeline, alpha)
            return float(scores[token_a] - scores[token_b])

        ends = (gap(reference, 0.0), gap(reference, 1.0))
        alpha, margin = bisect(lambda x: gap(reference, x), 0.0, 1.0, tolerance=min_change / 4, ends=ends)
        move = gap(reduced, alpha) - margin
        if abs(move) < min_change:
            continue
        for _ in range(3):  # the move itself shifts a little with alpha: aim again at the one measured
            alpha, margin = bisect(lambda x: gap(reference, x), 0.0, 1.0, target=-share * move,
                                   tolerance=tolerance * share * abs(move), ends=ends)
            move = gap(reduced, alpha) - margin
            if abs(abs(margin / move) - share) <= tolerance * share:
                break
        else:
            continue
        winner, runner_up = (token_a, token_b) if margin > 0 else (token_b, token_a)
        exact, rounded = logits(reference, alpha), logits(reduced, alpha)
        if int(exact.argmax()) != winner or int(rounded.argmax()) != runner_up or \
                set(np.argsort(exact)[-2:].tolist()) != {winner, runner_up}:
            continue  # no swap, or between the two glyphs a third token leads
        sign = 1.0 if margin > 0 else -1.0
        return NearTie(image=blend_pages(page, page_b, alpha), lines=tuple(lines), cell=(row, column),
                       glyphs=(glyph, other), alpha=alpha, position=position, prefix=tuple(prefix), winner=winner,
                       runner_up=runner_up, margin=sign * margin, change=sign * move, cells_tried=tried)
    raise ValueError(f"none of the first {tried} cells gives a near-tie whose margin the reduced precision moves by "
                     f"{min_change} logits or more; lower min_change or try another page")


def cell_strip(tie: NearTie, *, scale: int = 4) -> Image.Image:
    """The blended cell between the two glyphs it mixes, as drawn on the page: [glyph a | blend | glyph b],
    enlarged `scale` times (nearest neighbour, so the grey levels stay visible)."""
    row, column = tie.cell
    box = (column * CELL, row * CELL, (column + 1) * CELL, (row + 1) * CELL)
    pages = (render_typewriter_page(_with_char(tie.lines, row, column, tie.glyphs[0])), tie.image,
             render_typewriter_page(_with_char(tie.lines, row, column, tie.glyphs[1])))
    strip = Image.new("RGB", (3 * CELL + 2 * 4, CELL), "white")
    for index, page in enumerate(pages):
        strip.paste(page.crop(box), (index * (CELL + 4), 0))
    return strip.resize((strip.width * scale, strip.height * scale), resample=Image.Resampling.NEAREST)


def plot_margins(study: MarginStudy, tie: NearTie | None = None):
    """Each position's f32 margin (x, log scale) against the reduced precision's move of it against the leader
    (y: minus the change); a token flips exactly above the diagonal y = x. Returns the matplotlib figure, closed: a
    notebook shows it once, as the cell's result, not a second time through the inline backend."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    against = -study.changes
    axes.scatter(study.margins, against, s=6, alpha=0.5, label=f"sample pages ({len(study.margins)} positions)")
    if tie is not None:
        axes.scatter([tie.margin], [-tie.change], s=60, marker="*", color="tab:red", label="the near-tie page")
    low = max(min(float(study.margins.min()), tie.margin if tie else np.inf) / 2, 1e-4)
    edge = np.geomspace(low, float(study.margins.max()) * 2, 200)
    top = max(float(against.max()), -tie.change if tie else 0.0) * 1.3
    axes.plot(edge, edge, color="black", linewidth=1)
    axes.fill_between(edge, edge, top, color="tab:red", alpha=0.08, label="the reduced precision flips the token")
    axes.set(xscale="log", xlim=(edge[0], edge[-1]), ylim=(min(float(against.min()), 0.0) * 1.3, top),
             xlabel="f32 top-2 margin (logits)", ylabel="move of the margin against the leader (logits)")
    axes.legend(loc="lower left", fontsize=8)
    figure.tight_layout()
    plt.close(figure)
    return figure
