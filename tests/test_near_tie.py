"""The near-tie helpers of notebook 07: teacher-forced margins, the dithered blend of two glyphs, the bracketing
search and the construction of a page on which a reduced precision flips a token."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

import utils.evaluation.near_tie as near_tie
from utils.evaluation.near_tie import (NearTie, bisect, blend_pages, cell_strip, find_near_tie, look_alike,
                                       margin_study, ordered_dither, plot_margins, teacher_forced_logits, top2)
from utils.pages.reading_pages import sample_pages
from utils.pages.typewriter import CELL, render_typewriter_page
from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

PROMPT = "Text Recognition:"


def test_the_ordered_dither_spreads_every_threshold_once_per_tile():
    tile = ordered_dither((16, 16))
    assert sorted(np.round(tile.ravel() * 256 - 0.5).astype(int).tolist()) == list(range(256))
    assert 0 < tile.min() and tile.max() < 1
    assert ordered_dither((30, 40)).shape == (30, 40)


def test_the_blend_keeps_what_both_pages_share_and_ends_at_each_page():
    a = render_typewriter_page(["e"])
    b = render_typewriter_page(["o"])
    pixels = {alpha: np.asarray(blend_pages(a, b, alpha), np.float64) for alpha in (0.0, 0.3, 0.7, 1.0)}
    assert np.array_equal(pixels[1.0], np.asarray(a)) and np.array_equal(pixels[0.0], np.asarray(b))
    same = np.asarray(a) == np.asarray(b)
    assert all(np.array_equal(p[same], np.asarray(a)[same]) for p in pixels.values())
    exact = 0.3 * np.asarray(a, np.float64) + 0.7 * np.asarray(b, np.float64)
    assert abs(pixels[0.3][~same].mean() - exact[~same].mean()) < 0.5  # the dither rounds without a bias
    assert np.abs(pixels[0.3] - exact).max() < 1
    with pytest.raises(ValueError, match="alpha"):
        blend_pages(a, b, 1.5)


def test_a_look_alike_is_another_glyph_with_few_differing_pixels():
    assert look_alike("B") == "8" and look_alike("e") == "o"
    assert look_alike("e") != "e"
    with pytest.raises(ValueError, match="glyph"):
        look_alike("é")


def test_the_search_brackets_a_target_on_a_step_function_in_fewer_calls_than_halving():
    calls = []

    def staircase(x):
        calls.append(x)
        return np.floor(x * 1000) / 1000 * 4 - 1  # steps of 0.004, crossing zero near x = 0.25

    x, value = bisect(staircase, 0.0, 1.0, target=0.5, tolerance=0.003)
    assert abs(value - 0.5) <= 0.003 and value == staircase(x)
    assert len(calls) < 12
    x, value = bisect(lambda x: x ** 3 - 0.1, 0.0, 1.0, tolerance=1e-6)
    assert abs(value) <= 1e-6 and abs(x - 0.1 ** (1 / 3)) < 1e-5
    with pytest.raises(ValueError, match="bracket"):
        bisect(lambda x: x + 1, 0.0, 1.0)


def test_top2_gives_the_best_the_second_and_the_gap():
    best, second, margin = top2(np.array([[0.0, 3.0, 2.5, -1.0], [5.0, 1.0, 1.0, 0.0]]))
    assert best.tolist() == [1, 0] and second.tolist()[0] == 2
    np.testing.assert_allclose(margin, [0.5, 4.0])


class _Reader:
    """Writes the page's text, one token per character (token = code point), as the tiny typewriter reader does
    (`unpadded`: its rows without their trailing spaces, as a reader of merges writes them)."""

    def __init__(self, lines, unpadded=False):
        self.text = "\n".join(line.rstrip() if unpadded else line for line in lines)

    def generate(self, image, prompt):
        return SimpleNamespace(tokens=[ord(char) for char in self.text])

    def token_text(self, tokens):
        return "".join(chr(token) for token in tokens)


def _fake_logits(lines, written=None):
    """next_token_logits of a fake target that reads the cell of token `len(prefix)` of `written` (default: the
    padded rows): how far its pixels are from the look-alike's towards the glyph's (alpha, estimated) scores the
    glyph 10 * alpha and the look-alike 10 * (1 - alpha); a pipeline's `bias` is added to the look-alike's score (the
    reduced precision's move)."""
    written = written or "\n".join(lines)

    def logits(pipeline, image, prompt, prefix):
        before = written[:len(prefix)]
        row, column = before.count("\n"), len(before.rsplit("\n", 1)[-1])
        glyph, other = written[len(prefix)], look_alike(written[len(prefix)])
        box = np.s_[row * CELL:(row + 1) * CELL, column * CELL:(column + 1) * CELL, 0]
        cell = np.asarray(image, np.float64)[box]
        a = np.asarray(render_typewriter_page(near_tie._with_char(lines, row, column, glyph)), np.float64)[box]
        b = np.asarray(render_typewriter_page(near_tie._with_char(lines, row, column, other)), np.float64)[box]
        alpha = float(((cell - b) * (a - b)).sum() / ((a - b) ** 2).sum())
        scores = np.full(128, -100.0)
        scores[ord(glyph)], scores[ord(other)] = 10 * alpha, 10 * (1 - alpha) + pipeline.bias
        return scores

    return logits


def test_the_near_tie_puts_the_margin_at_half_the_move_on_the_side_it_goes_against(monkeypatch):
    lines = ["Be  ", "ox  "]
    monkeypatch.setattr(near_tie, "next_token_logits", _fake_logits(lines))
    reference, reduced = SimpleNamespace(bias=0.0), SimpleNamespace(bias=0.2)
    tie = find_near_tie(reference, reduced, _Reader(lines), lines, prompt=PROMPT, min_change=0.05)
    assert tie.cell == (0, 0) and tie.glyphs == ("B", "8") and tie.position == 0 and tie.prefix == ()
    assert (tie.winner, tie.runner_up) == (ord("B"), ord("8"))  # the move favours the look-alike: the glyph leads
    assert tie.change == pytest.approx(-0.2, abs=1e-9) and tie.margin == pytest.approx(0.1, rel=0.2)
    assert 0 < tie.margin < -tie.change and 0 < tie.alpha < 1
    assert np.array_equal(np.asarray(tie.image), np.asarray(blend_pages(
        render_typewriter_page(lines), render_typewriter_page(["8e  ", "ox  "]), tie.alpha)))
    assert cell_strip(tie, scale=2).size == (2 * (3 * CELL + 8), 2 * CELL)

    flipped = find_near_tie(reference, SimpleNamespace(bias=-0.2), _Reader(lines), lines, prompt=PROMPT,
                            min_change=0.05)
    assert (flipped.winner, flipped.runner_up) == (ord("8"), ord("B")) and flipped.margin > 0 > flipped.change


def test_the_near_tie_finds_its_cell_in_a_reading_of_unpadded_rows(monkeypatch):
    """A reader of merges writes rows without their trailing spaces: the cell's token is found by the rows it wrote,
    not by the page's width."""
    lines = ["    ", "Be  "]
    reader = _Reader(lines, unpadded=True)
    monkeypatch.setattr(near_tie, "next_token_logits", _fake_logits(lines, reader.text))
    tie = find_near_tie(SimpleNamespace(bias=0.0), SimpleNamespace(bias=0.2), reader, lines, prompt=PROMPT,
                        min_change=0.05)
    assert tie.cell == (1, 0) and tie.position == 1 and tie.prefix == (ord("\n"),) and tie.glyphs == ("B", "8")


def test_the_near_tie_search_says_when_no_cell_moves_enough(monkeypatch):
    lines = ["Be  "]
    monkeypatch.setattr(near_tie, "next_token_logits", _fake_logits(lines))
    with pytest.raises(ValueError, match="none of the first 2 cells"):
        find_near_tie(SimpleNamespace(bias=0.0), SimpleNamespace(bias=0.01), _Reader(lines), lines, prompt=PROMPT,
                      min_change=0.05)


@pytest.fixture(scope="module")
def target(tiny_ir):
    return SpeculativeOcrPipeline(tiny_ir[0], device="CPU", precision="f32")


def test_teacher_forcing_gives_the_logits_of_decoding_token_by_token(target):
    page = sample_pages()[0]
    tokens = target.generate(page.image, PROMPT, max_new_tokens=12).tokens
    forced = teacher_forced_logits(target, page.image, PROMPT, tokens)
    session = target.language_model
    session.reset()
    stepped = [session.prefill(target.prompt_embeddings(page.image, PROMPT))[0]]
    for token in tokens[:-1]:
        stepped.append(session.decode_one(target.embed(np.array([[token]], np.int64))[0, 0])[0])
    assert forced.shape == (len(tokens), len(stepped[0]))
    np.testing.assert_allclose(forced, np.array(stepped), atol=1e-4)
    assert forced.argmax(-1).tolist() == tokens


def test_the_margin_study_of_a_pipeline_against_itself_moves_nothing(target):
    page = sample_pages()[0]
    tokens = target.generate(page.image, PROMPT, max_new_tokens=12).tokens
    study = margin_study(target, target, [(page.name, page.image, tokens)], prompt=PROMPT)
    assert study.greedy and study.flips == 0 and len(study.margins) == len(tokens)
    assert np.abs(study.changes).max() < 1e-4 and (study.margins > 0).all()
    assert study.tightest(1) == [int(np.argmin(study.margins))]
    other = [tokens[0], (tokens[1] + 1) % 100, *tokens[2:]]  # not what the target writes at position 1
    assert not margin_study(target, target, [(page.name, page.image, other)], prompt=PROMPT).greedy


def test_the_margin_plot_marks_the_near_tie():
    study = near_tie.MarginStudy(cases=np.array(["a", "a"], dtype=object), positions=np.arange(2),
                                 tokens=np.array([1, 2]), runners_up=np.array([3, 4]),
                                 margins=np.array([0.5, 3.0]), changes=np.array([-0.1, 0.05]),
                                 reduced_best=np.array([1, 2]))
    tie = NearTie(image=Image.new("RGB", (CELL, CELL)), lines=("a",), cell=(0, 0), glyphs=("a", "o"), alpha=0.5,
                  position=0, prefix=(), winner=1, runner_up=3, margin=0.02, change=-0.04, cells_tried=1)
    figure = plot_margins(study, tie)
    assert len(figure.axes[0].collections) >= 3  # the pages, the near-tie, the region where tokens flip
