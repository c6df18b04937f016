"""A small document archive drawn offline, to try and test archive reading: typed pages, a PDF and a broken file.

The pages are held-out reading pages (`utils.pages.reading_pages`), which the shipped tiny pair reads; the
PDF's pages are written at `PDF_DPI`, so they render back at the page's own size, the one shape the tiny
reader reads.
"""

from __future__ import annotations

from pathlib import Path

from utils.pages.reading_pages import reading_pages
from utils.pipeline.preprocessing.pdf import PDF_DPI

__all__ = ["ARCHIVE_SEED", "BROKEN_FILE", "write_sample_archive"]

ARCHIVE_SEED = 7  # the held-out stream the archive's pages come from
BROKEN_FILE = "scans/torn.png"  # a file whose bytes are not an image


def write_sample_archive(folder: Path | str, *, images: int = 4, pdf_pages: int = 2, broken: bool = True) -> dict:
    """Writes `images` typed pages as PNGs (`scans/page-NN.png`), a PDF of `pdf_pages` more (`letters/bundle.pdf`,
    none when 0) and, with `broken`, a file that is no image; returns {file as records name it: page text} with
    a PDF page named `letters/bundle.pdf page N`."""
    folder = Path(folder)
    pages = reading_pages(images + pdf_pages, seed=ARCHIVE_SEED, split="held-out")
    texts = {}
    (folder / "scans").mkdir(parents=True, exist_ok=True)
    for number, page in enumerate(pages[:images], 1):
        page.image.save(folder / "scans" / f"page-{number:02d}.png")
        texts[f"scans/page-{number:02d}.png"] = page.text
    if pdf_pages:
        (folder / "letters").mkdir(exist_ok=True)
        first, *rest = [page.image.convert("RGB") for page in pages[images:]]
        first.save(folder / "letters" / "bundle.pdf", "PDF", save_all=True, append_images=rest, resolution=PDF_DPI)
        texts |= {f"letters/bundle.pdf page {number}": page.text for number, page in enumerate(pages[images:], 1)}
    if broken:
        (folder / BROKEN_FILE).write_bytes(b"this file was cut off before its first pixel")
    return texts
