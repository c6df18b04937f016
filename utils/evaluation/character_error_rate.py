"""Character error rate: how far a reading is from the page's text, in edits per character of the text."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["edit_distance", "character_error_rate", "alignment", "substitutions", "row_slip", "ROW_OVERRUN"]


def edit_distance(read: str, truth: str) -> int:
    """Levenshtein distance: the fewest insertions, deletions and substitutions that turn `read` into `truth`."""
    previous = list(range(len(truth) + 1))
    for row, read_char in enumerate(read, 1):
        current = [row]
        for column, truth_char in enumerate(truth, 1):
            current.append(min(previous[column] + 1, current[column - 1] + 1,
                               previous[column - 1] + (read_char != truth_char)))
        previous = current
    return previous[-1]


def alignment(read: str, truth: str) -> list[tuple[str, str]]:
    """A fewest-edits alignment of `read` to `truth`, in page order: (page character, character read) for each
    match or substitution, ("", character) for a character read that the page lacks, (character, "") for a page
    character the reading lacks."""
    table = [[0] * (len(truth) + 1) for _ in range(len(read) + 1)]
    for row in range(len(read) + 1):
        for column in range(len(truth) + 1):
            table[row][column] = row + column if not row or not column else min(
                table[row - 1][column] + 1, table[row][column - 1] + 1,
                table[row - 1][column - 1] + (read[row - 1] != truth[column - 1]))
    pairs, row, column = [], len(read), len(truth)
    while row or column:
        if row and column and table[row][column] == table[row - 1][column - 1] + (read[row - 1] != truth[column - 1]):
            pairs.append((truth[column - 1], read[row - 1]))
            row, column = row - 1, column - 1
        elif row and table[row][column] == table[row - 1][column] + 1:
            pairs.append(("", read[row - 1]))
            row -= 1
        else:
            pairs.append((truth[column - 1], ""))
            column -= 1
    return pairs[::-1]


def substitutions(read: str, truth: str) -> list[tuple[str, str]]:
    """(page character, character read) for each substitution of a fewest-edits alignment of `read` to `truth`:
    the glyphs the reader took for others, in page order (insertions and deletions are not listed)."""
    return [(page, seen) for page, seen in alignment(read, truth) if page and seen and page != seen]


def character_error_rate(pairs: Iterable[tuple[str, str]]) -> float:
    """Edits over characters, pooled over (read, truth) pairs: the CER of a set of pages (can exceed 1).

    Raises:
        ValueError: when the truths hold no character.
    """
    edits = characters = 0
    for read, truth in pairs:
        edits += edit_distance(read, truth)
        characters += len(truth)
    if not characters:
        raise ValueError("character_error_rate: the reference texts are empty")
    return edits / characters


ROW_OVERRUN = 2  # characters a row of a reading may run past its page row before `row_slip` counts it


def row_slip(read: str, truth: str) -> bool:
    """Whether a reading lost its place on the page: it has another number of rows than the page, one of its rows
    is nearer (in edits) to another row of the page than to its own, as when a row is repeated or skipped, or a row
    runs on past its own by more than `ROW_OVERRUN` characters (it went on writing what it had just written)."""
    read_rows, truth_rows = read.split("\n"), truth.split("\n")
    if len(read_rows) != len(truth_rows):
        return True
    for index, row in enumerate(read_rows):
        if len(row) > len(truth_rows[index]) + ROW_OVERRUN:
            return True
        own = edit_distance(row, truth_rows[index])
        if any(edit_distance(row, other) < own for other in truth_rows):
            return True
    return False
