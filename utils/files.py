"""Atomic folder writes and file hashes, shared by every stage that writes model folders."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_directory", "sha256_file", "folder_size"]


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


def folder_size(path: Path | str) -> int:
    """Total size in bytes of the files below `path`."""
    return sum(file.stat().st_size for file in Path(path).rglob("*") if file.is_file())
