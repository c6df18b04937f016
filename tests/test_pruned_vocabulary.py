"""Target text outside a pruned draft vocabulary: which characters need it, and which steps it ended."""

from __future__ import annotations

import pytest

from utils.engine.verification import StepRecord
from utils.evaluation.pruned_vocabulary import OutsideToken, outside_characters, outside_tokens, with_capitals_as


def _encode(text: str) -> list[int]:
    """A stand-in tokenizer: one token per character, its code point; 'xy' is one token (a merge)."""
    return [1000] if text == "xy" else [ord(char) for char in text]


def test_outside_characters_are_those_with_a_token_the_draft_cannot_propose():
    vocabulary = [ord("a"), ord("b"), ord("J") + 1]
    assert outside_characters(_encode, vocabulary, characters="abJc") == "Jc"
    assert outside_characters(_encode, vocabulary + [ord("J"), ord("c")], characters="abJc") == ""
    assert outside_characters(_encode, [ord("x"), ord("y")], characters=["x", "xy"]) == "xy"  # the merge is outside


def test_capitals_are_written_as_the_characters_in_turn():
    assert with_capitals_as("Hello World, OK", "J") == "Jello Jorld, JJ"
    assert with_capitals_as("Hello World, OK", "J%") == "Jello %orld, J%"
    assert with_capitals_as("no capitals 12", "J") == "no capitals 12"
    with pytest.raises(ValueError, match="at least one character"):
        with_capitals_as("Hello", "")


def test_an_outside_token_is_the_bonus_that_ends_its_step_or_follows_all_drafts():
    vocabulary = {1, 2, 3}
    steps = [StepRecord(drafted=(), emitted=(9,)),  # the prefill: no draft
             StepRecord(drafted=(2, 3, 1), emitted=(2, 3, 9)),  # two drafts accepted, the third rejected at the 9
             StepRecord(drafted=(1, 2), emitted=(1, 2, 8)),  # both drafts accepted, then the target's 8
             StepRecord(drafted=(1, 2), emitted=(3,))]
    found = outside_tokens(steps, vocabulary)
    assert found == [OutsideToken(step=0, position=0, token=9, accepted=0, drafted=()),
                     OutsideToken(step=1, position=2, token=9, accepted=2, drafted=(2, 3, 1)),
                     OutsideToken(step=2, position=2, token=8, accepted=2, drafted=(1, 2))]
    assert all(token.is_bonus for token in found)
    assert [token.stopped_acceptance for token in found] == [False, True, False]
    assert [token.rejected_draft for token in found] == [None, 1, None]


def test_a_token_inside_the_vocabulary_is_not_reported():
    assert outside_tokens([StepRecord(drafted=(1, 2), emitted=(1, 2, 3))], [1, 2, 3]) == []
