"""The held-out pages where a tiny reader is most easily wrong (`utils.pages.reading_pages.HARD_KINDS`), both text
no language prior can predict; `utils.evaluation.glyph_confusion` scores readings of them.

- **Look-alike glyphs** (`look_alike_pages`): strings drawn from the classes of `LOOK_ALIKE_CLASSES` (0/O/o,
  1/I/l/|, brackets, +/x, n/m, ...) at every glyph size of the atlas.
- **Rows of digits** (`digit_grid_pages`): grids of digit groups where a group often repeats one just written, so
  only the page says where a row ends. A reader that loses its place there skips or repeats a row, or runs on to
  its budget (`utils.tiny.reading_report` counts both).
"""

from __future__ import annotations

from utils.pages.reading_pages import ReadingPage, reading_pages
from utils.pages.typewriter import GLYPH_SIZES, Ink, render_typewriter_page

__all__ = ["LOOK_ALIKE_PAGES_PER_SIZE", "DIGIT_GRID_PAGES", "look_alike_pages", "digit_grid_pages"]

LOOK_ALIKE_PAGES_PER_SIZE = 3  # held-out look-alike pages drawn at each of the atlas's 7 glyph sizes
DIGIT_GRID_PAGES = 20  # held-out pages of digit rows


def look_alike_pages(per_size: int = LOOK_ALIKE_PAGES_PER_SIZE, *, seed: int = 0) -> list[ReadingPage]:
    """Held-out pages of look-alike strings, `per_size` at every glyph size of the atlas (`GLYPH_SIZES`), in the
    sample pages' black on white: the glyph, at its size, is all that tells one character from another."""
    texts = reading_pages(per_size * len(GLYPH_SIZES), seed=seed, split="held-out", kinds=("look-alikes",))
    return [ReadingPage(page.kind, page.text,
                        render_typewriter_page(page.text.split("\n"), Ink(size=GLYPH_SIZES[index // per_size])))
            for index, page in enumerate(texts)]


def digit_grid_pages(count: int = DIGIT_GRID_PAGES, *, seed: int = 0) -> list[ReadingPage]:
    """Held-out pages of digit rows (`digit-grid`: one group length and separator per page, groups repeated)."""
    return reading_pages(count, seed=seed, split="held-out", kinds=("digit-grid",))
