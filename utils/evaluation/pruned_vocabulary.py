"""Target text a pruned draft vocabulary cannot propose, and where such text ends a step's accepted prefix.

A DSpark draft proposes only the target tokens of its vocabulary (`local-to-target.json`). A target token outside
it is never drafted, so at its position the draft is wrong for sure: greedy verification accepts the drafts
before it and the target writes it as the step's bonus token (`utils.engine.verification`). These helpers find the
characters that need such tokens, put them into a page's text, and find the steps of a run that wrote them, so a
notebook can show the mechanism on a page instead of stating it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from utils.engine.verification import StepRecord
from utils.pages.typewriter import GLYPHS

__all__ = ["outside_characters", "with_capitals_as", "OutsideToken", "outside_tokens"]


def outside_characters(encode: Callable[[str], Sequence[int]], draft_vocabulary: Iterable[int], *,
                       characters: Iterable[str] = GLYPHS) -> str:
    """The characters of `characters` that need a target token outside the draft vocabulary, in their order.

    Args:
        encode: text -> target token ids, without special tokens; each character is encoded on its own.
        draft_vocabulary: the target ids the draft can propose (`local-to-target.json`).
        characters: the characters to check (default: the printable ASCII a typewriter page can hold).
    """
    vocabulary = {int(token) for token in draft_vocabulary}
    return "".join(char for char in characters if any(int(token) not in vocabulary for token in encode(char)))


def with_capitals_as(text: str, characters: str) -> str:
    """`text` with its capital letters A-Z written as `characters`, taken in turn: characters a draft cannot
    propose, placed where words start, inside text that a reader reads and a draft proposes.

    Raises:
        ValueError: when `characters` is empty.
    """
    if not characters:
        raise ValueError("with_capitals_as needs at least one character to write in place of the capitals")
    turn = itertools.count()
    return re.sub("[A-Z]", lambda _: characters[next(turn) % len(characters)], text)


@dataclass(frozen=True)
class OutsideToken:
    """A token of a run's output that lies outside the draft vocabulary, and the step that wrote it."""

    step: int  # index of the step in the run's steps (0: the prefill)
    position: int  # its index among the tokens the step emitted
    token: int
    accepted: int  # drafts the step accepted
    drafted: tuple[int, ...]  # the drafts the step verified, in target ids

    @property
    def is_bonus(self) -> bool:
        """Whether it is the step's bonus token: the target's own token right after the accepted drafts."""
        return self.position == self.accepted

    @property
    def stopped_acceptance(self) -> bool:
        """Whether a draft stood at its position and was rejected there: the accepted prefix ends right before it
        (a bonus after all drafts were accepted ended no prefix)."""
        return self.is_bonus and self.accepted < len(self.drafted)

    @property
    def rejected_draft(self) -> int | None:
        """The draft the target rejected at its position, or None when no draft stood there."""
        return self.drafted[self.position] if self.position < len(self.drafted) else None


def outside_tokens(steps: Sequence[StepRecord], draft_vocabulary: Iterable[int]) -> list[OutsideToken]:
    """Every emitted token of `steps` outside the draft vocabulary, in the order the run wrote them.

    Args:
        steps: a run's steps (`GenerationMetrics.steps`, or the reference loop's `SpeculativeResult.steps`).
        draft_vocabulary: the target ids the draft can propose.
    """
    vocabulary = {int(token) for token in draft_vocabulary}
    return [OutsideToken(step=index, position=position, token=int(token), accepted=step.accepted,
                         drafted=tuple(step.drafted))
            for index, step in enumerate(steps) for position, token in enumerate(step.emitted)
            if int(token) not in vocabulary]
