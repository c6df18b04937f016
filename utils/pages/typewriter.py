"""Typewriter pages: text on a grid of 28-pixel cells, one character per cell, so one image token per character.

MiniCPM-OCR merges 2 x 2 patches of 14 pixels into one image token ("4x"), so a 28-pixel cell is exactly one
token when the page reaches the model at its own size (the tiny target's processor never rescales a page
that fits in `scale_resolution`²). That is what lets a model of a third of a megabyte read: each image token
holds one glyph, 18 to 24 pixels tall, and the page's tokens come in the order the text is read.

A page is `rows` x (`width` + 1) cells; every sample and generated page has the one shape `PAGE_ROWS` x
`PAGE_WIDTH` (`fit_page`). Row r holds line r padded with spaces to `width` characters; the
last column stays blank: it is where a reader writes the line break, or, on the last row, ends its answer.
So the text of a page, as the tiny reader writes it (`page_text`), is the grid read row by row, every row
`width` characters long (trailing spaces included), the rows joined by newlines: character k of that text is
image token k, and the end of the answer is the page's last image token. A text written without the rows' trailing
spaces, or without trailing blank rows, finds each character's cell by `text_cells`.

Text someone types is wrapped into such rows (`typed_lines`, one page); a text longer than a page is split
between rows into several pages of the one shape (`typed_pages_lines`), read one at a time, and the readings are
joined back into the text's rows (`joined_reading`).

Glyphs come from a bitmap atlas shipped with the suite (`glyphs.png`, printable ASCII in DejaVu Sans Mono at
seven sizes), drawn once from matplotlib's copy of the font by `draw_glyph_atlas`. Pages are pasted from it,
never rasterised by FreeType at run time, so the same text gives the same pixels with any Pillow.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["CELL", "PAGE_ROWS", "PAGE_WIDTH", "PAGE_CELLS", "MAX_PAGE_CELLS", "GLYPH_ATLAS", "GLYPH_SIZES",
           "PAGE_GLYPH_SIZE", "GLYPHS", "Ink", "page_text", "grid_text", "text_cells", "fit_page", "typed_lines",
           "typed_page", "typed_pages_lines", "typed_pages", "save_typed_pages", "joined_reading", "render_typewriter_page",
           "draw_glyph_atlas"]

CELL = 28  # pixels per cell side: one "4x" image token of 14-pixel patches
# The one shape of every generated and sample page (`fit_page`): rows x characters, then the blank column. With
# one shape and one prompt, the rotary offset from the position writing character k to image token k is the same
# on every page, which a draft can learn (`docs/tiny-pair.md`: it is what lets the tiny draft read ahead).
PAGE_ROWS, PAGE_WIDTH = 6, 26
PAGE_CELLS = PAGE_ROWS * (PAGE_WIDTH + 1)  # image tokens of a page, and tokens of its answer (EOS included)
MAX_PAGE_CELLS = 400  # the largest page a reader at scale_resolution 560 sees unscaled
GLYPH_ATLAS = Path(__file__).with_name("glyphs.png")
GLYPH_SIZES = (18, 19, 20, 21, 22, 23, 24)  # font sizes in pixels, one atlas row each
PAGE_GLYPH_SIZE = 22  # the size of sample and held-out pages
GLYPHS = "".join(chr(code) for code in range(33, 127))  # printable ASCII; a space is a blank cell
_BASELINE = 21  # pixels from a cell's top to the text baseline: room for capitals above and descenders below


def draw_glyph_atlas() -> Image.Image:
    """Draws the atlas: one row per size of `GLYPH_SIZES`, one `CELL`-square column per character of `GLYPHS`,
    each glyph centred on its cell's baseline, white ink (coverage) on black. Run once to make `GLYPH_ATLAS`."""
    import matplotlib
    from PIL import ImageDraw, ImageFont

    font_path = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSansMono.ttf"
    atlas = Image.new("L", (len(GLYPHS) * CELL, len(GLYPH_SIZES) * CELL), 0)
    draw = ImageDraw.Draw(atlas)
    for row, size in enumerate(GLYPH_SIZES):
        font = ImageFont.truetype(str(font_path), size)
        for column, char in enumerate(GLYPHS):
            draw.text((column * CELL + CELL / 2, row * CELL + _BASELINE), char, font=font, fill=255, anchor="ms")
    return atlas


@cache
def _atlas() -> np.ndarray:
    """[sizes, glyphs, CELL, CELL] float32 ink coverage in [0, 1]."""
    pixels = np.asarray(Image.open(GLYPH_ATLAS).convert("L"), dtype=np.float32) / 255.0
    expected = (len(GLYPH_SIZES) * CELL, len(GLYPHS) * CELL)
    if pixels.shape != expected:
        raise ValueError(f"{GLYPH_ATLAS}: {pixels.shape[1]}x{pixels.shape[0]} pixels, expected "
                         f"{expected[1]}x{expected[0]} ({len(GLYPHS)} glyphs x {len(GLYPH_SIZES)} sizes)")
    return pixels.reshape(len(GLYPH_SIZES), CELL, len(GLYPHS), CELL).transpose(0, 2, 1, 3)


def page_text(lines: list[str]) -> str:
    """The text of a page as the reader writes it: every row padded to the widest line, rows joined by newlines."""
    width = max(map(len, lines))
    return "\n".join(line.ljust(width) for line in lines)


def grid_text(text: str, *, width: int = PAGE_WIDTH, rows: int = PAGE_ROWS) -> str:
    """`text` as its page's grid reads: every row padded to `width`, missing rows added blank, rows joined by
    newlines, so character k is cell k of a page of `rows` x (`width` + 1) cells (the last one, where a reader ends,
    excepted). A ValueError names what does not fit."""
    lines = text.split("\n")
    if len(lines) > rows:
        raise ValueError(f"the page has {rows} rows; the text has {len(lines)}")
    too_wide = [line for line in lines if len(line) > width]
    if too_wide:
        raise ValueError(f"a row of the page holds {width} characters; {too_wide[0]!r} has {len(too_wide[0])}")
    return "\n".join(line.ljust(width) for line in lines + [""] * (rows - len(lines)))


def text_cells(text: str, *, width: int = PAGE_WIDTH, rows: int = PAGE_ROWS) -> list[int]:
    """The cell of every character of `text` on a page of `rows` x (`width` + 1) cells, then the page's last cell:
    character (row r, column c) is cell r * (width + 1) + c, a line break its row's blank last column, and the end
    of the answer (EOS) the last cell. So a reader that writes rows without their trailing spaces, or stops before
    blank rows, still knows which cells each character it writes shows. A ValueError names what does not fit.

    Returns:
        len(text) + 1 cell indices, increasing.
    """
    grid_text(text, width=width, rows=rows)  # checks the fit
    cells, row, column = [], 0, 0
    for char in text:
        if char == "\n":
            cells.append(row * (width + 1) + width)
            row, column = row + 1, 0
        else:
            cells.append(row * (width + 1) + column)
            column += 1
    return cells + [rows * (width + 1) - 1]


def fit_page(lines: list[str]) -> list[str]:
    """`lines` as a page of the one shape: `PAGE_ROWS` rows of `PAGE_WIDTH` characters. Shorter lines are padded
    with spaces and missing rows added blank, so any text that fits the grid is drawn on the one page the tiny pair
    reads; a ValueError names what does not fit."""
    if len(lines) > PAGE_ROWS:
        raise ValueError(f"a page has at most {PAGE_ROWS} rows; got {len(lines)}")
    too_wide = [line for line in lines if len(line) > PAGE_WIDTH]
    if too_wide:
        raise ValueError(f"a page row holds at most {PAGE_WIDTH} characters; {too_wide[0]!r} has {len(too_wide[0])}")
    return [line.ljust(PAGE_WIDTH) for line in [*lines, *[""] * (PAGE_ROWS - len(lines))]]


def _typed_rows(text: str) -> list[str]:
    """Text someone typed as rows of at most `PAGE_WIDTH` characters, trailing spaces dropped: each line wrapped at
    spaces (a longer word is cut), tabs as four spaces, blank lines kept and trailing ones dropped. A ValueError
    names characters the atlas has no glyph for, or says the text is empty."""
    unknown = sorted({char for char in text.replace("\t", " ").replace("\n", " ")} - set(GLYPHS) - {" "})
    if unknown:
        raise ValueError(f"the tiny pair's font has printable ASCII only; remove {''.join(unknown)!r}")
    rows = []
    for line in text.replace("\t", "    ").rstrip().splitlines() or [""]:
        line = line.rstrip()
        while len(line) > PAGE_WIDTH:
            cut = line.rfind(" ", 1, PAGE_WIDTH + 1)
            cut = PAGE_WIDTH if cut <= 0 else cut
            rows.append(line[:cut].rstrip())
            line = line[cut:].lstrip(" ")
        rows.append(line)
    if not any(row.strip() for row in rows):
        raise ValueError("type some text: the page is empty")
    return rows


def typed_lines(text: str) -> list[str]:
    """Text someone typed, as the rows of ONE page of the one shape (`_typed_rows`, then `fit_page`), for the
    pages and notebooks that want a single page. A ValueError says what does not fit: more than `PAGE_ROWS` rows
    (`typed_pages_lines` reads such a text as several pages), or characters the atlas has no glyph for."""
    rows = _typed_rows(text)
    if len(rows) > PAGE_ROWS:
        raise ValueError(f"a page holds {PAGE_ROWS} rows of {PAGE_WIDTH} characters; this text needs {len(rows)} "
                         f"rows (typed_pages splits it into {-(-len(rows) // PAGE_ROWS)} pages)")
    return fit_page(rows)


def typed_page(text: str) -> Image.Image:
    """Text someone typed, drawn as the one page the tiny pair reads (`typed_lines`, in the sample pages' ink)."""
    return render_typewriter_page(typed_lines(text))


def typed_pages_lines(text: str) -> list[list[str]]:
    """Text of any length someone typed, as pages of the one shape: the rows wrapped as `typed_lines` wraps them,
    split every `PAGE_ROWS` rows (a page break falls between rows, never inside one), each page `fit_page`d, so
    the last page's missing rows are blank. The tiny pair reads one page at a time; `joined_reading` joins the
    readings again. A ValueError names characters outside the atlas, or says the text is empty.

    Returns:
        One list of `PAGE_ROWS` rows of `PAGE_WIDTH` characters per page, in reading order.
    """
    rows = _typed_rows(text)
    return [fit_page(rows[first:first + PAGE_ROWS]) for first in range(0, len(rows), PAGE_ROWS)]


def typed_pages(text: str) -> list[Image.Image]:
    """Text of any length someone typed, drawn as the pages the tiny pair reads (`typed_pages_lines`, in the
    sample pages' ink), in reading order."""
    return [render_typewriter_page(lines) for lines in typed_pages_lines(text)]


def save_typed_pages(text: str, folder: Path | str) -> list[Path]:
    """Saves `typed_pages(text)` as PNG files `page-1.png`, `page-2.png`, ... in `folder`, numbered with as many
    digits as the last page needs, so that a sorted listing, as `python -m utils.ocr FOLDER --out RESULTS.jsonl`
    reads a folder, is the reading order. The folder is created, or must be empty: it then holds exactly the text's
    pages, none left from another text. Every page is drawn before any file is written.

    Returns:
        The files written, in reading order.
    """
    images = typed_pages(text)
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ValueError(f"{folder} is not an empty folder; save a typed text's pages into a new or empty one")
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"page-{number:0{len(str(len(images)))}d}.png" for number in range(1, len(images) + 1)]
    for image, path in zip(images, paths):
        image.save(path)
    return paths


def joined_reading(readings: list[str], *, rows: int = PAGE_ROWS) -> str:
    """The readings of a typed text's pages, in order, joined as the text reads: the pages' rows joined by
    newlines, each row without its trailing spaces (a reader of padded rows writes every row to the page's width)
    and the blank rows after the last written row dropped (the last page's padding). Every page but the last is a
    full page of `rows` rows (`typed_pages_lines`), so a reading of one that stops after its last written row (a
    reader of unpadded rows) is given back the blank rows it did not write: a blank row that ends a page stays.

    That is the typed text's rows: `joined_reading` of the pages' own texts (`page_text` of each of
    `typed_pages_lines(text)`, padded or `trimmed`) is the text as wrapped, its rows joined by newlines, which a
    joined reading is scored against. A reading that lost its place keeps what it wrote; the score shows it.
    """
    pages = [reading.split("\n") for reading in readings]
    pages = [page + [""] * (rows - len(page)) for page in pages[:-1]] + pages[-1:]
    return "\n".join(row.rstrip() for page in pages for row in page).rstrip("\n")


class Ink:
    """How a page is inked: glyph size, ink and paper grey levels, and how far each glyph may stray in its cell.

    The defaults draw the sample and held-out pages; training draws pages with `Ink.random`.
    """

    def __init__(self, size: int = PAGE_GLYPH_SIZE, ink: int = 0, paper: int = 255, jitter: int = 0,
                 rng: np.random.Generator | None = None):
        if size not in GLYPH_SIZES:
            raise ValueError(f"glyph size {size} px is not in the atlas; choose one of {GLYPH_SIZES}")
        if not 0 <= ink < paper <= 255:
            raise ValueError(f"ink={ink} and paper={paper} must satisfy 0 <= ink < paper <= 255")
        if jitter and rng is None:
            raise ValueError("a jittered page needs an rng")
        self.size, self.ink, self.paper, self.jitter, self.rng = size, ink, paper, jitter, rng

    @classmethod
    def random(cls, rng: np.random.Generator, *, unmoved_share: float = 0.0) -> Ink:
        """A training page's ink: any atlas size, grey ink on off-white paper, glyphs moved by up to 2 pixels, except
        on `unmoved_share` of the pages, where every glyph sits in its cell as on the sample pages and typed pages.

        A reader trained on moved glyphs alone confuses look-alikes (`(` and `{`, n and m) when none is moved: that
        offset is one of the 25 a glyph may take, but training never showed it in every cell of a page at once
        (docs/tiny-pair.md)."""
        size, ink, paper = int(rng.choice(GLYPH_SIZES)), int(rng.integers(0, 90)), int(rng.integers(200, 256))
        unmoved = bool(unmoved_share) and rng.random() < unmoved_share  # no draw at 0: the pages stay as they were
        return cls(size=size, ink=ink, paper=paper, jitter=0 if unmoved else 2, rng=rng)

    def offset(self) -> tuple[int, int]:
        if not self.jitter:
            return 0, 0
        dy, dx = self.rng.integers(-self.jitter, self.jitter + 1, size=2)
        return int(dy), int(dx)


def render_typewriter_page(lines: list[str], ink: Ink | None = None) -> Image.Image:
    """Draws `lines` on a grid of `CELL`-pixel cells: len(lines) rows, (widest line + 1) columns, no margin.

    Args:
        lines: the page's lines, printable ASCII (a space is a blank cell).
        ink: glyph size, grey levels and jitter; defaults to black 22-pixel glyphs on white, unmoved.

    Returns:
        An RGB image of (width + 1) * CELL x len(lines) * CELL pixels.
    """
    ink = ink or Ink()
    unknown = sorted({char for line in lines for char in line} - set(GLYPHS) - {" "})
    if unknown:
        raise ValueError(f"characters outside printable ASCII cannot be drawn: {''.join(unknown)!r}")
    if not any(line.strip() for line in lines):
        raise ValueError("a page needs at least one character")
    glyphs = _atlas()[GLYPH_SIZES.index(ink.size)]
    width = max(map(len, lines)) + 1
    coverage = np.zeros((len(lines) * CELL + 2 * CELL, width * CELL + 2 * CELL), dtype=np.float32)
    for row, line in enumerate(lines):
        for column, char in enumerate(line):
            if char == " ":
                continue
            dy, dx = ink.offset()
            top, left = (row + 1) * CELL + dy, (column + 1) * CELL + dx
            cell = coverage[top:top + CELL, left:left + CELL]
            np.maximum(cell, glyphs[GLYPHS.index(char)], out=cell)
    coverage = coverage[CELL:-CELL, CELL:-CELL]
    grey = np.rint(ink.paper - coverage * (ink.paper - ink.ink)).astype(np.uint8)
    return Image.fromarray(grey, mode="L").convert("RGB")
