"""PDF pages as images: what people bring to an OCR tool, rendered page by page with PDFium (pypdfium2).

pypdfium2 is imported when a PDF is opened, not with the package. A PDF that cannot be read fails with one
ValueError saying why: encrypted (PDFium needs a password), broken, or without pages.

A page that is one image filling the page (a scan, or an image saved as a PDF) is rendered at that image's own
size in pixels, whatever resolution the PDF was saved at: a typewriter page saved at 72 or 300 dpi comes back
with the 28-pixel cells its reader reads, not scaled by 150/72 or 150/300. Any other page is rendered at
`PDF_DPI`. Either is scaled down when it would exceed `MAX_IMAGE_PIXELS` (a poster-sized page costs no more
than the largest image the suite accepts).
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path

from PIL import Image

from utils.pipeline.preprocessing.image_io import MAX_IMAGE_PIXELS

__all__ = ["PDF_DPI", "PdfSource", "is_pdf", "PdfPages"]

PDF_DPI = 150  # a page of text at 150 dpi keeps 10-point glyphs about 20 pixels high
_POINTS_PER_INCH = 72
_MAGIC = b"%PDF-"
_SCALE_SLACK = 1e-9  # relative: below any real difference of scale, above float32's noise in a page's size
_FILLS_PAGE = 0.01  # points: how closely an image must cover the page to be the page

PdfSource = str | os.PathLike | bytes | bytearray | memoryview


def is_pdf(source) -> bool:
    """Whether `source` (a path or encoded bytes) is meant as a PDF: a `.pdf` name or bytes that start as one."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source[:len(_MAGIC)]) == _MAGIC
    return isinstance(source, (str, os.PathLike)) and Path(source).suffix.lower() == ".pdf"


class PdfPages:
    """The pages of one PDF, rendered one at a time; use it as a context manager to close the file.

    Args:
        source: a path or the PDF's bytes.
        name: how messages name the document (default: the path, or "the uploaded PDF").
        dpi: the rendering resolution.
    """

    def __init__(self, source: PdfSource, *, name: str | None = None, dpi: float = PDF_DPI):
        import pypdfium2 as pdfium

        self.name = name or (str(source) if isinstance(source, (str, os.PathLike)) else "the uploaded PDF")
        self.dpi = dpi
        data = bytes(source) if isinstance(source, (bytes, bytearray, memoryview)) else self._read(source)
        if not data:
            raise ValueError(f"{self.name} is empty: 0 bytes")
        try:
            self._document = pdfium.PdfDocument(io.BytesIO(data))
        except pdfium.PdfiumError as error:
            # PDFium's last error is global and not reset by a load that fails without one (an empty page
            # tree), so a password error counts only where the file declares its encryption.
            if getattr(error, "err_code", None) == pdfium.raw.FPDF_ERR_PASSWORD and b"/Encrypt" in data:
                raise ValueError(f"{self.name} is encrypted: PDFium cannot open it without its password; "
                                 "save an unprotected copy first") from None
            raise ValueError(f"{self.name} is not a readable PDF: it is broken, cut off or has no pages") from None
        if len(self._document) == 0:
            self.close()
            raise ValueError(f"{self.name} has no pages")

    def _read(self, path: str | os.PathLike) -> bytes:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{self.name} does not exist or is not a file")
        return Path(path).read_bytes()

    def __len__(self) -> int:
        return len(self._document)

    def numbers(self, pages: tuple[int, int] | None = None) -> range:
        """The page numbers (from 1) of `pages` = (first, last), all pages when None; refuses pages it lacks."""
        first, last = pages or (1, len(self))
        if not 1 <= first <= last <= len(self):
            raise ValueError(f"pages {first}-{last} are out of range: {self.name} has {len(self)} "
                             f"page{'s' if len(self) > 1 else ''}")
        return range(first, last + 1)

    def render(self, number: int) -> Image.Image:
        """Page `number` (from 1) as an RGB image: a page that is one image at that image's size in pixels, any
        other at `dpi` (the nearest whole size in pixels); smaller if it would exceed MAX_IMAGE_PIXELS."""
        page = self._document[number - 1]
        try:
            width, height = page.get_size()
            scale = _image_scale(page, width, height) or self.dpi / _POINTS_PER_INCH
            scale = min(scale, math.sqrt(MAX_IMAGE_PIXELS / max(width * height, 1.0)))
            # PDFium sizes the bitmap by rounding up and stretches the page over it, so a page size stored in
            # float32 (362.88 pt at 150 dpi: 756.0000001 px) would gain a pixel and blur every glyph: aim a hair
            # below the size, and keep the nearest whole size (crop what a fractional size rounds up)
            image = page.render(scale=scale * (1 - _SCALE_SLACK)).to_pil().convert("RGB")
            return image.crop((0, 0, max(1, round(width * scale)), max(1, round(height * scale))))
        finally:
            page.close()

    def close(self) -> None:
        self._document.close()

    def __enter__(self) -> PdfPages:
        return self

    def __exit__(self, *_) -> None:
        self.close()


def _image_scale(page, width: float, height: float) -> float | None:
    """Pixels per point that render `page` at its image's own size, when the page is one image filling it (a
    scan, or an image saved as a PDF at any resolution) with the page's aspect; else None."""
    import pypdfium2.raw as pdfium_c

    objects = list(page.get_objects(max_depth=1))
    if len(objects) != 1 or objects[0].type != pdfium_c.FPDF_PAGEOBJ_IMAGE:
        return None
    left, bottom, right, top = objects[0].get_bounds()
    if max(abs(left), abs(bottom), abs(right - width), abs(top - height)) > _FILLS_PAGE:
        return None
    pixels_wide, pixels_high = objects[0].get_px_size()
    scale = pixels_wide / width
    return scale if abs(pixels_high - height * scale) < 1 else None  # drawn unrotated, unstretched
