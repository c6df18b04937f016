"""Sample document pages, drawn offline from the text shipped with the suite (no downloads).

Each page is a small document-like image (text block, table, formula, receipt, two columns, form, ...)
rendered with PIL's built-in font, so the same page comes out on every machine. `typewriter_sample_pages`
holds the same kinds of document as typewriter pages (`utils.evaluation.typewriter`), the pages a reading tiny
target reads; no generated training page shows a row of either set (`sample_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from utils.evaluation.typewriter import page_text, render_typewriter_page
from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT

__all__ = ["CORPUS_PATH", "SAMPLE_PROMPTS", "SamplePage", "sample_pages", "typewriter_sample_pages", "sample_rows",
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


# Typewriter sample pages (`typewriter_sample_pages`): the same kinds of document, in rows a typewriter page holds.
_TYPEWRITER_SAMPLES = {
    "text-block": ("The river rose in the hills",
                   "above the town and ran for",
                   "forty miles to the sea. The",
                   "mill stood where the valley",
                   "narrowed, and for two hundred",
                   "years it ground the grain."),
    "table": ("| Item      |  2024 |  2025 |",
              "| Fees      | 12400 | 13150 |",
              "| Donations |  3820 |  4105 |",
              "| Room hire |  2160 |  1980 |",
              "| Staff     |  9700 | 10050 |",
              "| Total     | 28080 | 29285 |"),
    "formula": (r"$$\bar{t} = \frac{1}{n}",
                r"\sum_{i=1}^{n} t_i$$",
                "The interval is",
                r"$\bar{t} \pm 1.96 s/\sqrt{n}$."),
    "invoice": ("INVOICE No. 2025-0417",
                "Date: 17/4/2025",
                "Bill to: Northfield Ltd",
                "Toner, black    3   183.60",
                "Paper, A4      12   294.00",
                "Subtotal            477.60",
                "VAT 20%              95.52",
                "Total due           573.12"),
    "receipt": ("GREEN LEAF CAFE",
                "12 Station Road",
                "2 x Flat white      6.40",
                "1 x Tea, large      2.90",
                "1 x Cheese scone    3.10",
                "TOTAL              12.40",
                "Thank you!"),
    "letter": ("Dear Ms Okafor,",
               "From 1 May the reading room",
               "opens at 9:00 and closes at",
               "18:00 on weekdays.",
               "Yours sincerely,",
               "J. Lindqvist"),
    "two-columns": ("1 Introduction   2 Related work",
                    "Scanned pages    Early engines",
                    "mix text and     cut lines and",
                    "tables.          read glyphs."),
    "form": ("APPLICATION FORM",
             "Surname: ____________",
             "First name: _________",
             "Date of birth: __/__/____",
             "[ ] I agree to the terms.",
             "Signature: __________"),
    "timetable": ("Line 7, Monday to Friday",
                  "| Stop     | 06:10 | 07:25 |",
                  "| Central  | 06:10 | 07:25 |",
                  "| Market   | 06:14 | 07:30 |",
                  "| Hospital | 06:21 | 07:38 |"),
    "minutes": ("Minutes, 12 June 2025",
                "Present: A. Brandt (chair),",
                "K. Mensah, L. Novak",
                "1. Minutes approved.",
                "2. Balance 8,412.35.",
                "Closed at 20:45."),
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


def sample_pages() -> list[SamplePage]:
    """The sample pages, in a fixed order."""
    pages = []
    for name, (start, lines, columns) in _LAYOUTS.items():
        text = _section(start, lines)
        pages.append(SamplePage(name, text, render_page(text, columns=columns)))
    return pages


def typewriter_sample_pages() -> list[SamplePage]:
    """The typewriter sample pages, in a fixed order: what a reading tiny target reads (`utils.tiny.reader`)."""
    return [SamplePage(name, page_text(list(lines)), render_typewriter_page(list(lines)))
            for name, lines in _TYPEWRITER_SAMPLES.items()]


@cache
def sample_rows() -> frozenset[str]:
    """Every row of both sets of sample pages (trailing spaces dropped): text no generated training page may show.

    Cached: every generated page checks its rows against it, and the sample pages are drawn to compute it."""
    rows = {line for lines in _TYPEWRITER_SAMPLES.values() for line in lines}
    rows |= {line for page in sample_pages() for line in page.text.splitlines()}
    return frozenset(line.rstrip() for line in rows if line.strip())
