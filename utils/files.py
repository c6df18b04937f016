"""Atomic folder writes and file hashes, shared by every stage that writes model folders."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_directory", "atomic_write_text", "sha256_file", "sha256_folder", "folder_size"]


@contextlib.contextmanager
def atomic_directory(final: Path | str, *, overwrite: bool = False) -> Iterator[Path]:
    """Yields a temporary folder beside `final` and moves it to `final` only if the block succeeds.

    A failed or interrupted write leaves nothing at `final` (and removes the temporary folder), so a folder
    that exists is always complete.

    Args:
        final: the folder to create.
        overwrite: replace `final` if it exists; otherwise an existing `final` is an error.
    """
    final = Path(final)
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final} already exists; pass overwrite=True to replace it")
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))
    staging.chmod(0o777 & ~_umask())  # mkdtemp makes it private; the finished folder gets the usual permissions
    try:
        yield staging
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def atomic_write_text(path: Path | str, text: str) -> None:
    """Writes `text` (UTF-8) to the file `path` through a temporary file beside it, renamed into place: `path` is
    either its old self or the whole new text, never half-written. Its folder must exist."""
    path = Path(path)
    handle, staging = tempfile.mkstemp(prefix=f".{path.name}.partial-", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(staging, 0o666 & ~_umask())  # mkstemp makes it private; the finished file gets the usual permissions
        os.replace(staging, path)
    finally:
        if os.path.exists(staging):
            os.remove(staging)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sha256_file(path: Path | str, *, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_folder(path: Path | str, *, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a folder's files: each file's path relative to `path`, its size and its bytes, in sorted
    order, so renaming, adding, removing or changing any file changes it."""
    folder, digest = Path(path), hashlib.sha256()
    for file in sorted(item for item in folder.rglob("*") if item.is_file()):
        digest.update(f"{file.relative_to(folder).as_posix()}\0{file.stat().st_size}\0".encode())
        with open(file, "rb") as opened:
            while chunk := opened.read(chunk_size):
                digest.update(chunk)
    return digest.hexdigest()


def folder_size(path: Path | str) -> int:
    """Total size in bytes of the files below `path`."""
    return sum(file.stat().st_size for file in Path(path).rglob("*") if file.is_file())
