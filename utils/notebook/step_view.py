"""What each speculative step did, as HTML for the notebooks and the OCR panel (no torch, no widgets).

Per verification step: the drafted tokens as text, coloured accepted / first rejected / discarded, the
target's bonus token (its own next token, which every step emits unless the end of the text or the token budget
stops the reading inside its accepted drafts: the view then says which), the drafts the confidence cut left
unverified, and each draft's confidence. And the speculative text beside the target-only text, with a mark saying
whether they are identical; and what was read beside the page's own text, with its character error rate. The texts
are set in a monospace font, where Il1 and O0 look as different as they are to the reader.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from utils.engine.verification import StepRecord
from utils.evaluation.character_error_rate import character_error_rate
from utils.evaluation.compare import first_difference
from utils.pages.typewriter import joined_reading

__all__ = ["END_OF_TEXT", "TOKEN_BUDGET", "DraftToken", "StepView", "step_views", "steps_html", "side_by_side_html",
           "reading_html", "text_reading_html"]

END_OF_TEXT, TOKEN_BUDGET = "end of text", "token budget"  # why a step emitted no bonus token

_COLOURS = {"accepted": "#c8e6c9", "rejected": "#ffcdd2", "discarded": "#eeeeee", "bonus": "#bbdefb",
            "cut": "#e1bee7"}


@dataclass(frozen=True)
class DraftToken:
    """One token of a step as the view shows it."""

    text: str
    status: str  # "accepted", "rejected" (the first mismatch), "discarded" (after it), "bonus" or "cut" (not verified)
    confidence: float | None = None


@dataclass(frozen=True)
class StepView:
    """One target pass: its drafts in order, then the target's bonus token (None when EOS or the budget cut
    the step inside the accepted drafts), then the drafts the confidence cut kept from the target.

    `no_bonus` says why a step has no bonus, `END_OF_TEXT` or `TOKEN_BUDGET`, when `step_views` was given the stop
    tokens (None otherwise, and for a step with a bonus)."""

    index: int
    drafts: tuple[DraftToken, ...]
    bonus: DraftToken | None
    cut: tuple[DraftToken, ...] = ()
    no_bonus: str | None = None

    @property
    def accepted(self) -> int:
        return sum(token.status == "accepted" for token in self.drafts)


def step_views(steps: Sequence[StepRecord], detokenize: Callable[[list[int]], str], *,
               stop_token_ids: Sequence[int] | None = None) -> list[StepView]:
    """Classifies every drafted token of every step (the prefill step, which drafts nothing, shows its token
    as the bonus).

    Args:
        steps: `OcrResult.metrics.steps` (or the reference loop's step records).
        detokenize: token ids -> text, e.g. `SpeculativeOcrPipeline.token_text` (special tokens written out).
        stop_token_ids: the tokens that end the text (`SpeculativeOcrPipeline.eos_token_ids`): with them, a step
            without a bonus says whether the end of the text or the token budget stopped it.
    """
    views = []
    for index, step in enumerate(steps):
        accepted = step.matched_drafts
        confidences = step.confidences or (None,) * len(step.drafted)
        drafts = []
        for position, (token, confidence) in enumerate(zip(step.drafted, confidences)):
            if position < accepted:
                status = "accepted"
            elif position == accepted and accepted < len(step.emitted):
                status = "rejected"
            else:
                status = "discarded"
            drafts.append(DraftToken(detokenize([token]), status, confidence))
        bonus = None if accepted >= len(step.emitted) else DraftToken(detokenize([step.emitted[accepted]]), "bonus")
        cut_confidences = step.cut_confidences or (None,) * len(step.cut)
        cut = tuple(DraftToken(detokenize([token]), "cut", confidence)
                    for token, confidence in zip(step.cut, cut_confidences))
        views.append(StepView(index, tuple(drafts), bonus, cut, _no_bonus(step, bonus, stop_token_ids)))
    return views


def _no_bonus(step: StepRecord, bonus: DraftToken | None, stop_token_ids: Sequence[int] | None) -> str | None:
    """Why a step emitted no bonus: its last token ended the text, or else the token budget ran out there."""
    if bonus is not None or stop_token_ids is None:
        return None
    return END_OF_TEXT if step.emitted and step.emitted[-1] in stop_token_ids else TOKEN_BUDGET


def _visible(text: str) -> str:
    return html.escape(text).replace(" ", "&middot;").replace("\n", "&#8629;") or "&empty;"


def _chip(token: DraftToken, *, label: str | None = None) -> str:
    style = (f"background:{_COLOURS[token.status]};padding:1px 3px;margin:1px;border-radius:3px;"
             f"font-family:monospace;display:inline-block")
    strike = ";text-decoration:line-through" if token.status == "rejected" else ""
    confidence = "" if token.confidence is None else f"<sub>{token.confidence:.2f}</sub>"
    text = html.escape(label) if label is not None else _visible(token.text)
    return f'<span title="{token.status}" style="{style}{strike}">{text}{confidence}</span>'


def steps_html(views: Sequence[StepView]) -> str:
    """A table: one row per step with its coloured drafts, the bonus token, and the accepted count."""
    legend = " ".join(_chip(DraftToken("", status), label=status) for status in _COLOURS)
    rows = "".join(
        f"<tr><td>{view.index}</td><td style='text-align:left'>{''.join(_chip(t) for t in view.drafts)}</td>"
        f"<td style='text-align:left'>{_bonus_cell(view)}</td>"
        f"<td>{view.accepted} of {len(view.drafts)}</td>"
        f"<td style='text-align:left'>{''.join(_chip(t) for t in view.cut)}</td></tr>"
        for view in views)
    return (f"<div>{legend} &nbsp; small numbers: the confidence head's predicted acceptance</div>"
            f"<table class='dspark-steps'><tr><th>step</th><th style='text-align:left'>drafted tokens</th>"
            f"<th style='text-align:left'>bonus</th><th>accepted</th>"
            f"<th style='text-align:left'>cut, not verified</th></tr>{rows}</table>")


def _bonus_cell(view: StepView) -> str:
    if view.bonus is not None:
        return _chip(view.bonus)
    return f"<i class='dspark-no-bonus'>none: {view.no_bonus}</i>" if view.no_bonus else ""


def side_by_side_html(speculative: str, target_only: str) -> str:
    """The speculative and the target-only text in two columns, headed by whether they are identical."""
    if speculative == target_only:
        verdict = "<b style='color:#2e7d32'>identical &#10003;</b>"
    else:
        verdict = (f"<b style='color:#c62828'>different from character {first_difference(speculative, target_only)} "
                   f"on &#10007;</b>")
    return _two_columns(f"Speculative vs target only: {verdict}", ("speculative", speculative, "dspark-speculative"),
                        ("target only", target_only, "dspark-target-only"))


def reading_html(read: str, truth: str) -> str:
    """What was read beside the page's own text, headed by the character error rate (edits per character of
    the page's text, `utils.evaluation.character_error_rate`)."""
    cer = character_error_rate([(read, truth)])
    return _two_columns(f"Character error rate: <b class='dspark-cer'>{cer:.1%}</b>",
                        ("page text", truth, "dspark-page-text"), ("read", read, "dspark-read"))


def text_reading_html(readings: list[str], truths: list[str]) -> str:
    """What was read beside the text, each as the text reads (`joined_reading`: the pages in order, every row without
    its trailing spaces, the blank rows at the end dropped), headed by the character error rate against that text.

    The app's one rule for every page it knows the text of (a sample page, a typed page, a typed text read as several
    pages): the errors per character of the text, not of the reader's padded grid (161 characters a page, whatever
    was typed on it), so one wrong character of a 16-character line is 6%, not 0.6%.

    Args:
        readings: what was read of each page, in order.
        truths: each page's own text (`utils.pages.typewriter.page_text`), in the same order.
    """
    return reading_html(joined_reading(readings), joined_reading(truths))


_TEXT_STYLE = "white-space:pre-wrap;font-family:monospace"


def _two_columns(heading: str, *columns: tuple[str, str, str]) -> str:
    """A heading over a table of (title, text, CSS class) columns, the texts escaped, kept as written and set in a
    monospace font."""
    cell = f"<td style='vertical-align:top;text-align:left'><pre class='{{}}' style='{_TEXT_STYLE}'>{{}}</pre></td>"
    titles = "".join(f"<th>{title}</th>" for title, _, _ in columns)
    texts = "".join(cell.format(css, html.escape(text)) for _, text, css in columns)
    return f"<div class='dspark-verdict'>{heading}</div><table><tr>{titles}</tr><tr>{texts}</tr></table>"
