"""The results file of an archive: JSON Lines, one record per page, appended and flushed as each page is read.

A record is `{"file", "page", "sha256", "path", ...}` with either the reading (`text`, `tokens`, ...) or an `error`;
`path` is where the file was read (resolved), so that a later run that names another file alike is refused.
Reading the file back is how a run resumes: a page whose (file, page, content hash) has a record is done. A
crash can cut the last line short; that line is dropped (the file is truncated to its last whole line) and its
page is read again. Every record carries the time it was written (`timestamp`, UTC, ISO 8601) and the run's
`settings`, the models' digests among them; a file written with other settings, or by a model that changed at the
same path, is refused rather than mixed, in one line naming the settings that differ. A file written before
records carried the digests is accepted: its records are taken as read by the models now at those paths.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["ResultsFile", "record_key", "read_results", "settings_differences"]

_KEY_FIELDS = ("file", "page", "sha256")
LATER_SETTINGS = ("target_digest", "draft_digest")  # settings added after results files were first written
_SHOWN_DIFFERENCES = 3  # settings a refusal names; more are counted
_SHOWN_VALUE = 24  # characters of a setting's value a refusal shows


def _difference(name: str, old, new) -> str:
    """`name old (now new)`, long values cut to `_SHOWN_VALUE` characters from a little before where they differ."""
    old, new = (json.dumps(value, ensure_ascii=False) for value in (old, new))
    start = 0
    if max(len(old), len(new)) > _SHOWN_VALUE:
        start = max(0, len(os.path.commonprefix([old, new])) - _SHOWN_VALUE // 3)
    return f"{name} {_clip(old, start)} (now {_clip(new, start)})"


def _clip(text: str, start: int) -> str:
    end = start + _SHOWN_VALUE
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def settings_differences(recorded: dict | None, settings: dict) -> list[str]:
    """`name old (now new)` for each setting in which a record's `recorded` settings differ from `settings`. A
    setting of `LATER_SETTINGS` that the record lacks is no difference: it was written before that setting was."""
    recorded = recorded if isinstance(recorded, dict) else {}
    names = [name for name in dict.fromkeys([*settings, *recorded])
             if not (name in LATER_SETTINGS and name not in recorded)]
    return [_difference(name, recorded.get(name), settings.get(name)) for name in names
            if recorded.get(name) != settings.get(name)]


def _utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def record_key(record: dict) -> tuple[str, int | None, str]:
    """(file, page, sha256): what a record is matched to a page by (`PageTask.key`)."""
    return record["file"], record["page"], record["sha256"]


def _parse(path: Path) -> tuple[list[dict], int]:
    """The records of the results file `path`, and the bytes its whole lines take (a cut last line is left out)."""
    data = path.read_bytes()
    whole = data.rfind(b"\n") + 1  # a line is written with its newline in one call: no newline, cut short
    records = []
    for number, line in enumerate(data[:whole].decode("utf-8", errors="replace").splitlines(), 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict) or not all(name in record for name in _KEY_FIELDS):
            raise ValueError(f"{path}: line {number} is not a page record of `python -m utils.ocr --out`; "
                             "name another --out file")
        records.append(record)
    return records, whole


def read_results(path: Path | str) -> list[dict]:
    """The records of a results file, in the order they were written, leaving the file as it is (a last line a
    crash cut short is left out). Raises ValueError for a line that is not a record, FileNotFoundError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: no results file to read")
    return _parse(path)[0]


class ResultsFile:
    """An archive's JSON Lines results file, opened to append; the records already in it are read first.

    Args:
        path: the file; created at the first record if missing (its folder must exist), so a run that stops before
            any record leaves no empty file.
        settings: the run's settings, written into every record; records of other settings are an error.

    Raises:
        ValueError: a line other than a cut last one is not a record, or the file holds another run's settings.
    """

    def __init__(self, path: Path | str, settings: dict):
        self.path, self.settings = Path(path), settings
        self.records, self.dropped_cut_line = self._read()
        for record in self.records:
            if differences := settings_differences(record.get("settings"), settings):
                shown, more = ", ".join(differences[:_SHOWN_DIFFERENCES]), len(differences) - _SHOWN_DIFFERENCES
                raise ValueError(f"{self.path} was read with other settings: {shown}"
                                 f"{f' and {more} more' if more > 0 else ''}; name another --out file, or run with "
                                 "the same settings")
        self._file = None

    def _read(self) -> tuple[list[dict], bool]:
        if not self.path.exists():
            return [], False
        records, whole = _parse(self.path)
        cut = whole < self.path.stat().st_size
        if cut:
            with open(self.path, "r+b") as file:
                file.truncate(whole)
        return records, cut

    def done(self, *, retry_failed: bool = False) -> set[tuple]:
        """The keys of the pages that have a record (with `retry_failed`, only those read without an error)."""
        return {record_key(record) for record in self.records if not (retry_failed and "error" in record)}

    def check_names(self, pages: Iterable) -> None:
        """Raises ValueError when a page is named in records as a file read earlier from another path with other
        content: records name a file relative to the folder given, so `scans/2023/a.png` and then `scans/2024/a.png`
        would both be `a.png`, and the second would pass for a new version of the first. (A file at another path
        with the same content is the same file moved: its records stand.)"""
        versions: dict[str, dict[str, str]] = {}  # file name -> {sha256: path read from}
        for record in self.records:
            if "path" in record:
                versions.setdefault(record["file"], {})[record["sha256"]] = record["path"]
        for page in pages:
            elsewhere = [path for path in versions.get(page.file, {}).values() if path != page.path]
            if elsewhere and page.sha256 not in versions[page.file]:
                raise ValueError(f"{self.path} holds {page.file} read from {elsewhere[0]}, and this run's {page.file} is "
                                 f"{page.path}, another file: give the folder that holds both (records then name "
                                 "them by their sub-folders), or name another --out file")

    def failed(self) -> dict[tuple, dict]:
        """The latest error record of each page whose latest record is an error."""
        latest = {record_key(record): record for record in self.records}
        return {key: record for key, record in latest.items() if "error" in record}

    def append(self, record: dict) -> None:
        """Writes `record` with the time and the run's settings as one line, and makes it durable before returning."""
        record = record | {"timestamp": _utc_now(), "settings": self.settings}
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.records.append(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> ResultsFile:
        return self

    def __exit__(self, *_) -> None:
        self.close()
