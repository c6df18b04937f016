"""Choosing a page by what happens on it, not by its index: the first page whose reading shows what a notebook
wants to show, so a retrained pair either still shows it on some page or fails with a message saying so."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from utils.evaluation.character_error_rate import character_error_rate

__all__ = ["read_exactly", "first_reading"]


def read_exactly(text: str, page) -> bool:
    """Whether a reading of a page with a known text (`page.text`) has no error (character error rate 0)."""
    return character_error_rate([(text, page.text)]) == 0


def first_reading(pages: Sequence, read: Callable[[Any], Any], wanted: Callable[[Any, Any], bool], *,
                  what: str) -> tuple[int, Any, Any]:
    """Reads the pages in order and returns (index, page, reading) of the first whose reading is `wanted`.

    Args:
        pages: the candidates, in the order to try them.
        read: page -> its reading (for example an `OcrResult`).
        wanted: (page, reading) -> whether it shows what is looked for.
        what: what is looked for, for the error ("is read without an error").

    Raises:
        ValueError: when no page qualifies.
    """
    for index, page in enumerate(pages):
        reading = read(page)
        if wanted(page, reading):
            return index, page, reading
    raise ValueError(f"none of the {len(pages)} pages {what}")
