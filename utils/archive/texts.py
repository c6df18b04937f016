"""Plain-text export of a results file: one text file per document, from the latest record of each page, in order.

A results file only grows: a page read again (a changed file, `--retry-failed`) has its new line after the old one.
For each document (the `file` its records name) the export takes the records of its latest version (the SHA-256 of
its latest record), the latest record of each page, and writes their texts in page order (rows without the
spaces and blank rows a reader pads its page with at their ends), each ending with a newline: a PDF's pages separated by a form feed (as pdftotext does), a page that failed as `[page N failed: ...]`,
and a page with no record between two that have one as `[page N: not read]`. `FOLDER/<file>.txt` keeps the
document's sub-folders (`scans/a.png` -> `scans/a.png.txt`); each text is written to a temporary file and renamed
into place, so none is ever half-written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from utils.cli import plural
from utils.files import atomic_write_text

__all__ = ["PAGE_SEPARATOR", "TextExport", "latest_pages", "document_text", "text_path", "export_texts"]

PAGE_SEPARATOR = "\f"  # between two pages of a document


@dataclass
class TextExport:
    """What an export wrote: documents (one text file each), their pages, and the pages marked as failed."""

    documents: int
    pages: int
    failed: int
    folder: str

    def __str__(self) -> str:
        return (f"{plural(self.documents, 'text file')} written to {self.folder} ({plural(self.pages, 'page')}, "
                f"{self.failed} failed)")


def latest_pages(records: list[dict]) -> dict[str, dict[int | None, dict]]:
    """{file: {page: its latest record}} for the latest version of each document, documents in the order their
    first record came."""
    version = {record["file"]: record["sha256"] for record in records}
    documents: dict[str, dict[int | None, dict]] = {}
    for record in records:
        if record["sha256"] == version[record["file"]]:
            documents.setdefault(record["file"], {})[record["page"]] = record
    return documents


def _page_text(record: dict | None, page: int | None) -> str:
    where = "" if page is None else f"page {page} "
    if record is None:
        return f"[page {page}: not read]"
    if "error" in record:
        return f"[{where}failed: {record['error']}]"
    return "\n".join(line.rstrip() for line in record["text"].splitlines()).rstrip("\n")


def document_text(pages: dict[int | None, dict]) -> str:
    """The text of one document from {page: record}: an image's text, or a PDF's pages in order (a page before the
    last one without a record marked as not read), each ending with a newline."""
    if None in pages:  # an image, or a PDF that could not be opened
        texts = [_page_text(pages[None], None)]
    else:
        texts = [_page_text(pages.get(number), number) for number in range(1, max(pages) + 1)]
    return PAGE_SEPARATOR.join(text if text.endswith("\n") else text + "\n" for text in texts)


def text_path(folder: Path | str, file: str) -> Path:
    """Where the text of the document records name `file` goes: `folder/<file>.txt`, kept inside `folder` (a
    leading `/` is dropped and `..` becomes `__`)."""
    parts = [("__" if part == ".." else part) for part in PurePosixPath(file).parts if part != "/"]
    return Path(folder).joinpath(*parts[:-1], parts[-1] + ".txt")


def export_texts(records: list[dict], folder: Path | str) -> TextExport:
    """Writes the text of every document of `records` (a results file's, in their order) into `folder` (created if
    missing), one file each; returns what was written."""
    pages = failed = 0
    documents = latest_pages(records)
    for file, document in documents.items():
        path = text_path(folder, file)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, document_text(document))
        pages += len(document)
        failed += sum("error" in record for record in document.values())
    return TextExport(documents=len(documents), pages=pages, failed=failed, folder=str(folder))
