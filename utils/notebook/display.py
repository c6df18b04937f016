"""Small display helpers for notebooks: tables as Markdown."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

__all__ = ["markdown_table"]


def markdown_table(rows: Iterable[Mapping], columns: list[str] | None = None, *,
                   right: Collection[str] = ()) -> str:
    """Renders dict rows as a Markdown table (columns default to the first row's keys; those in `right`, figures,
    are right-aligned)."""
    rows = list(rows)
    if columns is None:
        columns = list(rows[0]) if rows else []
    lines = ["| " + " | ".join(columns) + " |", "|" + "".join("---:|" if col in right else "---|" for col in columns)]
    lines += ["| " + " | ".join("" if row.get(col) is None else str(row.get(col)) for col in columns) + " |"
              for row in rows]
    return "\n".join(lines)
