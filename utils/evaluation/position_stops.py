"""Steps that accepted a draft and still never reached the next position: the end of a reading.

`conditional_acceptance` counts, per draft position k, the steps that reached k and those that accepted it. A step
that accepted draft k goes on to k + 1 unless something other than a rejection stops it there: the draft's own
block ends (k is the last draft it verified: the drafts per step, or the confidence cut), the text ends (draft k is
the end-of-text token) or the token budget runs out. So `accepted[k] - reached[k + 1]` counts those stops.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["stops_after_position"]


def stops_after_position(rows: Sequence[dict]) -> list[int]:
    """For each position k but the last of `conditional_acceptance` rows: the steps that accepted draft k and did
    not reach k + 1."""
    return [row["accepted"] - later["reached"] for row, later in zip(rows, rows[1:])]
