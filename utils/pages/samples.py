"""Sample pages, drawn offline (no downloads), each knowing its own text.

The sample pages every notebook, the app and the benchmarks show are generated typewriter pages of the
held-out split (`utils.pages.reading_pages.sample_pages`): what the shipped tiny pair reads.
`printed_sample_pages` are documents printed from the shipped corpus in PIL's built-in font (the
corpus-writing recipe holds them out, and no generated page shows their rows: `sample_rows`). The tiny reader
does not read those: it reads pages like the ones it was trained on (`docs/tiny-pair.md`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT

__all__ = ["CORPUS_PATH", "SAMPLE_PROMPTS", "SamplePage", "printed_sample_pages", "sample_rows",
           "render_page"]

CORPUS_PATH = Path(__file__).with_name("corpus.txt")  # the text of every page; the tiny tokenizer learns on it too

# The user prompts the suite asks about every page (MiniCPM-OCR's own prompt first).
SAMPLE_PROMPTS = (DEFAULT_PROMPT, "Read all the text in the image.")

_LINE_HEIGHT = 14
_MARGIN = 8


@dataclass(frozen=True)
class SamplePage:
    """A named page: the image and the text drawn on it."""

    name: str
    text: str
    image: Image.Image


def _section(start: str, lines: int) -> str:
    corpus = CORPUS_PATH.read_text(encoding="utf-8").splitlines()
    first = next(index for index, line in enumerate(corpus) if line.startswith(start))
    return "\n".join(corpus[first:first + lines])


# name -> (first line of the passage in the corpus, number of lines, columns)
_LAYOUTS = {
    "text-block": ("The river rose", 1, 1),
    "table": ("| Item | 2024", 9, 1),
    "formula": ("$$\\bar{t}", 3, 1),
    "invoice": ("INVOICE No.", 11, 1),
    "receipt": ("GREEN LEAF CAFE", 11, 1),
    "letter": ("Dear Ms Okafor", 8, 1),
    "two-columns": ("1 Introduction", 5, 2),
    "form": ("APPLICATION FORM", 7, 1),
    "timetable": ("Timetable, line 7", 7, 1),
    "minutes": ("Minutes of the meeting", 8, 1),
}


def _wrap(text: str, width: int) -> list[str]:
    lines = []
    for paragraph in text.splitlines():
        while len(paragraph) > width:
            cut = paragraph.rfind(" ", 0, width)
            cut = width if cut <= 0 else cut
            lines.append(paragraph[:cut])
            paragraph = paragraph[cut:].lstrip()
        lines.append(paragraph)
    return lines


def render_page(text: str, *, columns: int = 1, chars_per_line: int = 64) -> Image.Image:
    """Draws text in black on a white page, in one or more columns."""
    font = ImageFont.load_default()
    lines = _wrap(text, chars_per_line)
    per_column = -(-len(lines) // columns)
    column_width = int(max(font.getlength(line) for line in lines)) + 2 * _MARGIN
    image = Image.new("RGB", (columns * column_width, per_column * _LINE_HEIGHT + 2 * _MARGIN), "white")
    draw = ImageDraw.Draw(image)
    for index, line in enumerate(lines):
        column, row = divmod(index, per_column)
        draw.text((_MARGIN + column * column_width, _MARGIN + row * _LINE_HEIGHT), line, fill="black", font=font)
    return image


def printed_sample_pages() -> list[SamplePage]:
    """The sample documents printed in PIL's font, in a fixed order: what the corpus-writing recipe
    (`utils.tiny.pretrain`) holds out, and a real-size model reads."""
    pages = []
    for name, (start, lines, columns) in _LAYOUTS.items():
        text = _section(start, lines)
        pages.append(SamplePage(name, text, render_page(text, columns=columns)))
    return pages


@cache
def sample_rows() -> frozenset[str]:
    """Every row of the printed sample pages (trailing spaces dropped): text no generated page may show (the
    typewriter sample pages are held-out generated pages, which no training page shows by construction)."""
    return frozenset(line.rstrip() for page in printed_sample_pages() for line in page.text.splitlines()
                     if line.strip())
