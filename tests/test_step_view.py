"""The per-step view: which drafts were accepted, rejected or discarded after a rejection, and the bonus token."""

from __future__ import annotations

from utils.engine.verification import StepRecord
from utils.evaluation.character_error_rate import character_error_rate
from utils.notebook.step_view import (END_OF_TEXT, TOKEN_BUDGET, reading_html, side_by_side_html, step_views,
                                      steps_html, text_reading_html)
from utils.pages.typewriter import page_text, typed_lines, typed_pages_lines


def _text(tokens):
    return "".join(chr(ord("a") + token) for token in tokens)


def test_each_draft_is_accepted_first_rejected_or_discarded_and_the_bonus_follows():
    steps = [
        StepRecord(drafted=(), emitted=(0,)),  # prefill: the first token, nothing drafted
        StepRecord(drafted=(1, 2, 3, 4), emitted=(1, 2, 7), confidences=(0.9, 0.8, 0.4, 0.3)),
        StepRecord(drafted=(5, 6), emitted=(5, 6, 8), confidences=(0.9, 0.7)),  # all accepted
        StepRecord(drafted=(9, 10, 11), emitted=(9,), confidences=(0.6, 0.5, 0.2)),  # EOS (9) cut the step
    ]
    views = step_views(steps, _text)
    assert views[0].drafts == () and views[0].bonus.text == "a"
    assert [t.status for t in views[1].drafts] == ["accepted", "accepted", "rejected", "discarded"]
    assert views[1].bonus.text == "h" and views[1].accepted == 2
    assert [t.confidence for t in views[1].drafts] == [0.9, 0.8, 0.4, 0.3]
    assert [t.status for t in views[2].drafts] == ["accepted", "accepted"] and views[2].bonus.text == "i"
    assert [t.status for t in views[3].drafts] == ["accepted", "discarded", "discarded"]
    assert views[3].bonus is None
    # every emitted token is shown once: the accepted drafts, then the bonus
    assert [view.accepted + (view.bonus is not None) for view in views] == [len(step.emitted) for step in steps]


def test_drafts_the_confidence_cut_left_unverified_are_shown_apart():
    step = StepRecord(drafted=(1, 2), emitted=(1, 5), confidences=(0.9, 0.6), cut=(3, 4), cut_confidences=(0.4, 0.2))
    view = step_views([step], _text)[0]
    assert [t.status for t in view.drafts] == ["accepted", "rejected"] and view.accepted == 1
    assert [(t.text, t.status, t.confidence) for t in view.cut] == [("d", "cut", 0.4), ("e", "cut", 0.2)]
    page = steps_html([view])
    assert "1 of 2" in page and page.count('title="cut"') == 3  # the legend's chip and the two cut drafts
    assert "cut, not verified" in page


def test_html_shows_every_step_and_escapes_text():
    views = step_views([StepRecord(drafted=(1,), emitted=(2,), confidences=(0.25,))], lambda ids: "<b>\n")
    page = steps_html(views)
    assert page.count("<tr>") == 2 and "0 of 1" in page and "0.25" in page
    assert "&lt;b&gt;&#8629;" in page and "<b>\n" not in page


def test_side_by_side_marks_identical_and_where_texts_differ():
    assert "identical" in side_by_side_html("same", "same")
    different = side_by_side_html("abcX", "abcY")
    assert "different from character 3" in different and "identical" not in different


def test_the_reading_sits_beside_the_page_text_with_its_character_error_rate():
    page = reading_html("Tota1 <3", "Total <3")  # one substitution in 8 characters
    assert "12.5%" in page and "&lt;3" in page and "<3" not in page
    assert page.index("page text") < page.index("read") and "dspark-cer" in page
    assert "0.0%" in reading_html("same", "same")


def test_compared_texts_are_set_in_a_monospace_font_where_il1_and_o0_differ():
    for page in (side_by_side_html("Il1 O0", "Il1 OO"), reading_html("Il1 O0", "Il1 OO")):
        assert page.count("<pre ") == 2 and page.count("font-family:monospace") == 2


def test_a_page_is_scored_against_its_text_not_its_padded_grid():
    """One wrong character of a 16-character typed line: 1/16 of the text, not 1/161 of the page's padded grid;
    a text of several pages is scored by the same rule, its pages joined."""
    typed = "x = 1\ny = [2, 3]"
    truth = page_text(typed_lines(typed))
    assert len(truth) == 161
    read = truth.replace("3", "8")
    page = text_reading_html([read], [truth])
    assert f"dspark-cer'>{1 / len(typed):.1%}<" in page and f">{typed}</pre>" in page
    long = "\n".join(f"line {number}" for number in range(8))
    truths = [page_text(lines) for lines in typed_pages_lines(long)]
    joined = text_reading_html([truths[0].replace("0", "9"), truths[1]], truths)
    assert f"dspark-cer'>{character_error_rate([(long.replace('0', '9'), long)]):.1%}<" in joined
    assert f">{long}</pre>" in joined


def test_a_step_without_a_bonus_says_whether_the_text_or_the_budget_ended_it():
    eos = 9
    ended = StepRecord(drafted=(5, 9, 4), emitted=(5, 9), confidences=(0.9, 0.8, 0.7))  # EOS accepted as a draft
    budget = StepRecord(drafted=(5, 6, 7), emitted=(5, 6), confidences=(0.9, 0.8, 0.7))  # 2 tokens left
    full = StepRecord(drafted=(5, 6), emitted=(5, 6, 8), confidences=(0.9, 0.8))
    views = step_views([ended, budget, full], _text, stop_token_ids=(eos,))
    assert [view.no_bonus for view in views] == [END_OF_TEXT, TOKEN_BUDGET, None]
    page = steps_html(views)
    assert "none: end of text" in page and "none: token budget" in page
    assert step_views([ended], _text)[0].no_bonus is None  # without the stop tokens it cannot tell
    assert "none:" not in steps_html(step_views([ended], _text))
