"""The results file of an archive: JSON Lines, one record per page, appended and flushed as each page is read.

A record is `{"file", "page", "sha256", ...}` with either the reading (`text`, `tokens`, ...) or an `error`.
Reading the file back is how a run resumes: a page whose (file, page, content hash) has a record is done. A
crash can cut the last line short; that line is dropped (the file is truncated to its last whole line) and its
page is read again. Every record carries the run's `settings`, and a file written with other settings is refused
rather than mixed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["ResultsFile", "record_key"]

_KEY_FIELDS = ("file", "page", "sha256")


def record_key(record: dict) -> tuple[str, int | None, str]:
    """(file, page, sha256): what a record is matched to a page by (`PageTask.key`)."""
    return record["file"], record["page"], record["sha256"]


class ResultsFile:
    """An archive's JSON Lines results file, opened to append; the records already in it are read first.

    Args:
        path: the file; created if missing (its folder must exist).
        settings: the run's settings, written into every record; records of other settings are an error.

    Raises:
        ValueError: a line other than a cut last one is not a record, or the file holds another run's settings.
    """

    def __init__(self, path: Path | str, settings: dict):
        self.path, self.settings = Path(path), settings
        self.records, self.dropped_cut_line = self._read()
        for record in self.records:
            if record.get("settings") != settings:
                raise ValueError(f"{self.path} holds records read with other settings ({record.get('settings')}, "
                                 f"now {settings}); name another --out file, or run with the same settings")
        self._file = open(self.path, "a", encoding="utf-8")

    def _read(self) -> tuple[list[dict], bool]:
        if not self.path.exists():
            return [], False
        data = self.path.read_bytes()
        whole = data.rfind(b"\n") + 1  # a line is written with its newline in one call: no newline, cut short
        records = []
        for number, line in enumerate(data[:whole].decode("utf-8", errors="replace").splitlines(), 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict) or not all(name in record for name in _KEY_FIELDS):
                raise ValueError(f"{self.path}: line {number} is not a page record of `python -m utils.ocr --out`; "
                                 "name another --out file")
            records.append(record)
        if whole < len(data):
            with open(self.path, "r+b") as file:
                file.truncate(whole)
        return records, whole < len(data)

    def done(self, *, retry_failed: bool = False) -> set[tuple]:
        """The keys of the pages that have a record (with `retry_failed`, only those read without an error)."""
        return {record_key(record) for record in self.records if not (retry_failed and "error" in record)}

    def failed(self) -> dict[tuple, dict]:
        """The latest error record of each page whose latest record is an error."""
        latest = {record_key(record): record for record in self.records}
        return {key: record for key, record in latest.items() if "error" in record}

    def append(self, record: dict) -> None:
        """Writes `record` with the run's settings as one line, and makes it durable before returning."""
        record = record | {"settings": self.settings}
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.records.append(record)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ResultsFile:
        return self

    def __exit__(self, *_) -> None:
        self.close()
