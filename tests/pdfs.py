"""Small PDFs built on the spot for the tests (nothing is downloaded): pages from images, and the bad kinds."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

__all__ = ["pdf_of_images", "blank_pdf", "pdf_without_pages", "encrypted_pdf", "broken_pdf"]


def pdf_of_images(images: list[Image.Image], path: Path, *, dpi: float = 72.0) -> Path:
    """A PDF with one page per image, in order, as Pillow writes it at `dpi` (at 72 a page is the image's size in
    points; at 150 it is 72/150 of it)."""
    first, *rest = [image.convert("RGB") for image in images]
    first.save(path, "PDF", save_all=True, append_images=rest, resolution=dpi)
    return path


def _pdf(objects: list[bytes], trailer: bytes = b"") -> bytes:
    """A PDF file of numbered objects (1 is the catalog) with a correct cross-reference table."""
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    return out + b"trailer\n<< /Size %d /Root 1 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, trailer, xref)


_ONE_BLANK_PAGE = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                   b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 100] >>"]


def blank_pdf(path: Path) -> Path:
    """A one-page PDF of 200 x 100 points with no content at all: a page that is no image."""
    path.write_bytes(_pdf(_ONE_BLANK_PAGE))
    return path


def pdf_without_pages(path: Path) -> Path:
    """A well-formed PDF whose page tree is empty."""
    path.write_bytes(_pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]))
    return path


def encrypted_pdf(path: Path) -> Path:
    """A one-page PDF protected by a user password (standard security handler, revision 2) that is not empty."""
    handler = b"<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P -4 >>" % (b"11" * 32, b"22" * 32)
    path.write_bytes(_pdf(_ONE_BLANK_PAGE + [handler], b"/Encrypt 4 0 R /ID [<%s> <%s>] " % (b"33" * 16, b"33" * 16)))
    return path


def broken_pdf(path: Path) -> Path:
    """The first half of a valid one-page PDF: the header is there, the rest is cut off."""
    buffer = io.BytesIO()
    Image.new("RGB", (200, 100), "white").save(buffer, "PDF")
    path.write_bytes(buffer.getvalue()[:len(buffer.getvalue()) // 2])
    return path
