"""The pages of an archive: files and folders walked into a sorted list of (file, page, content hash).

A folder is walked for images and PDFs (by their suffix), sorted, hidden files and folders skipped; a file named
on its own is read whatever its suffix. A record names a file relative to the folder it was found in, or as it
was given. A file reached twice (a folder given twice, a file given beside its folder, a link) or holding the same
bytes as an earlier one (a copy) is listed once, under its first name: the listing says which were skipped. A PDF's
pages are counted here; a PDF that cannot be opened (encrypted, broken, no pages) becomes one error record for the
whole file, and the archive goes on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from utils.cli import plural
from utils.files import sha256_file
from utils.pipeline.preprocessing.pdf import PdfPages, is_pdf

__all__ = ["IMAGE_SUFFIXES", "PageTask", "Listing", "archive_files", "list_pages"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif", ".webp")


@dataclass(frozen=True)
class PageTask:
    """One page to read: what records call it, where a worker opens it, and the file's content hash."""

    file: str  # as records name it: relative to the folder given (with /), or the path as given
    path: str  # the file's absolute path, where a worker opens it
    page: int | None  # a PDF's page, counted from 1; None for an image
    sha256: str

    @property
    def key(self) -> tuple[str, int | None, str]:
        """What resume matches a record by: a changed file has another hash, so its pages are read again."""
        return self.file, self.page, self.sha256


@dataclass
class Listing:
    """The pages to read, the error records of files whose pages could not be counted, and the inputs skipped as
    repeats of earlier ones."""

    pages: list[PageTask] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)
    duplicates: list[tuple[str, str]] = field(default_factory=list)  # (name skipped, the earlier name it repeats)

    def duplicates_line(self) -> str:
        """One line saying how many inputs were skipped as repeats, and the first of them ("" if none)."""
        if not self.duplicates:
            return ""
        skipped, first = self.duplicates[0]
        example = f"{skipped} given again" if skipped == first else f"{skipped} repeats {first}"
        more = f", and {len(self.duplicates) - 1} more" if len(self.duplicates) > 1 else ""
        return (f"{plural(len(self.duplicates), 'duplicate input')} skipped, each read once under its first name "
                f"({example}{more})")


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _walk(folder: Path) -> list[Path]:
    found = []
    for root, folders, files in os.walk(folder):
        folders[:] = sorted(name for name in folders if not _is_hidden(name))
        found += [Path(root) / name for name in sorted(files)
                  if not _is_hidden(name) and Path(name).suffix.lower() in (*IMAGE_SUFFIXES, ".pdf")]
    return sorted(found)


def archive_files(inputs: list[Path | str]) -> tuple[list[tuple[str, Path]], list[tuple[str, str]]]:
    """(name in records, resolved path) of every file to read, in the order given, each folder walked sorted and
    each file once; and (name, earlier name) of every file reached again, skipped.

    Raises ValueError for an input that does not exist, a folder with nothing to read, or two files that records
    would name alike (two folders that both hold `a.png`).
    """
    files, first_names, duplicates, seen = [], {}, [], {}
    for given in map(Path, inputs):
        if given.is_dir():
            found = _walk(given)
            if not found:
                raise ValueError(f"{given} holds no images or PDFs ({', '.join(IMAGE_SUFFIXES)}, .pdf)")
            files += [(path.relative_to(given).as_posix(), path.resolve()) for path in found]
        elif given.is_file():
            files.append((given.as_posix(), given.resolve()))
        else:
            raise ValueError(f"{given} does not exist")
    unique = []
    for name, path in files:
        if path in first_names:
            duplicates.append((name, first_names[path]))
            continue
        first_names[path] = name
        if seen.setdefault(name, path) != path:
            raise ValueError(f"two inputs are both named {name} in records ({seen[name]} and {path}); "
                             "read them with separate --out files")
        unique.append((name, path))
    return unique, duplicates


def list_pages(inputs: list[Path | str]) -> Listing:
    """Every page of `inputs` (files and folders), in order, each file once, with an error record per PDF that
    cannot be opened."""
    files, duplicates = archive_files(inputs)
    listing, first_names = Listing(duplicates=duplicates), {}
    for name, path in files:
        digest = sha256_file(path)
        if digest in first_names:
            listing.duplicates.append((name, first_names[digest]))
            continue
        first_names[digest] = name
        if not is_pdf(path):
            listing.pages.append(PageTask(name, str(path), None, digest))
            continue
        try:
            with PdfPages(path, name=name) as document:
                count = len(document)
        except ValueError as error:
            listing.failures.append({"file": name, "page": None, "sha256": digest, "path": str(path),
                                     "error": str(error)})
            continue
        listing.pages += [PageTask(name, str(path), number, digest) for number in range(1, count + 1)]
    return listing
