"""Distilling the tiny draft: the batched training forward, the objective's data, determinism, layout, acceptance."""

from __future__ import annotations

import functools
import itertools
import json
import shutil
from collections import Counter

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from utils.checkpoint.draft import DRAFT_WEIGHTS, EXPORT_AUDIT, LOCAL_TO_TARGET, load_draft_checkpoint
from utils.pages.samples import printed_sample_pages
from utils.pages.reading_pages import TRAINING_KINDS, iter_reading_pages
from utils.pages.typewriter import Ink
from utils.files import sha256_file
from utils.reference.modeling import DraftContextCache, load_reference_draft
from utils.tiny import BUILD_STAMP, DistillConfig, TinyPairConfig, build_tiny_pair, default_pair
from utils.tiny.__main__ import main as tiny_cli
from utils.tiny.acceptance import measure_acceptance
from utils.tiny.anchor_batch import anchor_batch
from utils.tiny.anchor_forward import forward_anchor_blocks
from utils.tiny.config import READING_DISTILL
from utils.tiny.distill import distill_draft, frequent_vocabulary
from utils.tiny.distill_data import training_pages
from utils.tiny.draft import build_tiny_draft

ATOL = 1e-5  # float32: the same function, computed in another order
# The test's budget for a draft of the shipped reading target: the shipped recipe on fewer pages, for fewer steps.
SMALL = DistillConfig(**READING_DISTILL | {"pages": 16, "steps": 60, "calibration_pages": 4})
TINY = DistillConfig(pages=2, steps=3)  # enough to exercise every file the distillation writes


@pytest.fixture(scope="module")
def distilled(tmp_path_factory):
    """A random draft distilled here (`SMALL`) on the shipped target: (target folder, draft folder).

    The target is the shipped reader, whose answers are the page's text, so that the figures below test the
    distillation, not how this machine happened to train a target.
    """
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("distilled")
    target, random, draft = root / "target", root / "random", root / "draft"
    shutil.copytree(default_pair().target, target)
    random.mkdir()
    build_tiny_draft(default_pair().config, AutoTokenizer.from_pretrained(target), random)
    shutil.copytree(random, draft)
    report = distill_draft(target, draft, SMALL)
    assert report.calibration is not None and report.calibration.rejected > 0
    return target, draft


def test_batched_anchor_forward_equals_the_reference_forward_block(tiny_pair):
    draft = load_reference_draft(tiny_pair.draft)
    config = draft.config
    generator = torch.Generator().manual_seed(0)
    target_hidden = torch.randn(2, 30, len(config.target_layer_ids) * config.hidden_size, generator=generator)
    block_embeds = torch.randn(2, 3, config.block_size, config.hidden_size, generator=generator)
    anchors = torch.tensor([[0, 7, 29], [1, 12, 20]])  # includes an anchor without context and one at the end
    batched, _ = forward_anchor_blocks(draft, block_embeds, target_hidden, anchors)
    for n, a in np.ndindex(*anchors.shape):
        position = int(anchors[n, a])
        cache = DraftContextCache(config.num_hidden_layers)
        with torch.no_grad():
            reference = draft.forward_block(block_embeds[n, a][None], target_hidden[n, :position][None], cache)
        torch.testing.assert_close(batched[n, a], reference[0], rtol=0, atol=ATOL)
        torch.testing.assert_close(draft.logits(batched[n, a]), draft.logits(reference[0]), rtol=0, atol=ATOL)


def test_training_pages_never_show_a_line_of_the_held_out_pages():
    held_out = {line for page in printed_sample_pages() for line in page.text.splitlines() if line.strip()}
    assert held_out
    from utils.tiny import distill_data

    assert not held_out & set(distill_data.training_lines())
    first, again = training_pages(3, seed=4), training_pages(3, seed=4)
    assert [page.tobytes() for page in first] == [page.tobytes() for page in again]
    typewriter = training_pages(3, seed=4, style="typewriter")  # the training split, inked at random
    generated = itertools.islice(iter_reading_pages(seed=4, kinds=TRAINING_KINDS, ink=Ink.random), 3)
    assert [page.tobytes() for page in typewriter] == [page.image.tobytes() for page in generated]


def test_typewriter_training_pages_leave_the_asked_share_of_glyphs_unmoved():
    unmoved = training_pages(3, seed=4, style="typewriter", unmoved_share=1.0)  # every glyph where a user's page has it
    generated = itertools.islice(iter_reading_pages(seed=4, kinds=TRAINING_KINDS,
                                                    ink=functools.partial(Ink.random, unmoved_share=1.0)), 3)
    assert [page.tobytes() for page in unmoved] == [page.image.tobytes() for page in generated]
    assert [page.tobytes() for page in unmoved] != [page.tobytes() for page in training_pages(3, seed=4,
                                                                                             style="typewriter")]


def test_frequent_vocabulary_keeps_draft_ids_of_kept_tokens_and_holds_eos():
    current = np.array([9, 3, 7, 5])
    counts = Counter({3: 10, 8: 9, 6: 9, 9: 1})
    chosen = frequent_vocabulary(current, counts, eos_token_id=7)
    assert sorted(chosen.tolist()) == [3, 6, 7, 8]  # EOS, then by count; 8 and 6 tie, the smaller id first
    assert chosen[1] == 3 and chosen[2] == 7  # kept tokens keep their draft ids
    assert chosen.tolist() == [6, 3, 7, 8]  # freed ids take the newcomers in rank order


@pytest.mark.slow
def test_distilled_draft_keeps_the_published_layout(distilled):
    _, draft = distilled
    random = draft.with_name("random")  # the draft as built, before the distillation
    checkpoint = load_draft_checkpoint(draft)  # validates names, shapes, d2t against local-to-target
    random_tensors, tensors = load_file(str(random / DRAFT_WEIGHTS)), load_file(str(draft / DRAFT_WEIGHTS))
    assert {name: t.shape for name, t in tensors.items()} == {name: t.shape for name, t in random_tensors.items()}
    assert tensors["d2t"].dtype == np.int64
    assert (draft / "config.json").read_text() == (random / "config.json").read_text()
    audit = json.loads((draft / EXPORT_AUDIT).read_text())
    assert audit["weights_sha256"] == sha256_file(draft / DRAFT_WEIGHTS)
    assert audit["local_to_target_sha256"] == sha256_file(draft / LOCAL_TO_TARGET)
    assert json.loads((draft / "config.json").read_text())["eos_token_id"] in checkpoint.target_ids
    built_ids = np.arange(len(random_tensors["d2t"])) + random_tensors["d2t"]
    kept = np.isin(built_ids, checkpoint.target_ids)
    assert kept.any() and (checkpoint.target_ids[kept] == built_ids[kept]).all()
    assert not np.array_equal(tensors["lm_head.weight"], random_tensors["lm_head.weight"])


@pytest.mark.slow
def test_distilled_draft_lands_in_an_honest_band_on_held_out_pages(distilled):
    """Training is not bit-reproducible across CPUs, so this asserts a band, not bits.

    On the sample pages with the prompt the draft learns (the first 48 tokens of each reading), the random draft
    reaches 1.00 tokens per step; this small distillation (60 steps on 16 pages) reached 1.32 tokens per step,
    120 drafts accepted and 346 rejected, AUC 0.85 here (150 steps: 1.50; the shipped recipe's 1,500 steps on
    64 pages: 6.84 over whole pages). The bounds ask for a draft clearly better than chance (more than one draft
    in seven steps accepted), with real rejections and a confidence head that ranks better than a coin.
    """
    report = measure_acceptance(*distilled, prompts=SMALL.prompts, max_new_tokens=48)
    assert report.tokens_per_step >= 1.15, report
    assert report.accepted_positions >= 50 and report.rejected_positions >= 10, report
    assert report.confidence_auc > 0.6, report


def test_distillation_is_deterministic_from_the_command_line_and_python(tmp_path, capsys):
    argv = ["--out", str(tmp_path / "cli"), "--distill", "--distill-pages", "2", "--distill-steps", "3",
            "--checkpoint-dir", str(tmp_path / "checkpoints")]
    assert tiny_cli(argv) == 0
    assert "(distilled draft)" in capsys.readouterr().out
    assert [path.name for path in (tmp_path / "checkpoints").iterdir()] == ["distill.checkpoint.pt"]
    again = build_tiny_pair(tmp_path / "python", TinyPairConfig(), distill=TINY)
    for name in (DRAFT_WEIGHTS, LOCAL_TO_TARGET, EXPORT_AUDIT):
        assert sha256_file(tmp_path / "cli" / "draft" / name) == sha256_file(again.draft / name)
    assert json.loads((again.root / BUILD_STAMP).read_text())["distill"] == TINY.options()
    with pytest.raises(FileExistsError, match="other options"):
        build_tiny_pair(again.root, TinyPairConfig())


def test_a_distillation_cut_short_resumes_to_the_bits_of_one_that_ran_through(tiny_pair, tmp_path, monkeypatch):
    from utils.tiny import distill
    from utils.tiny.config import Checkpoints

    config = DistillConfig(pages=2, steps=4)
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    for folder in (whole, resumed):
        shutil.copytree(tiny_pair.draft, folder)
    distill_draft(tiny_pair.target, whole, config)
    checkpoints = Checkpoints(tmp_path / "checkpoints", options={}, every=2)
    loss, calls = distill.dspark_loss, []

    def cut_at_the_fourth_step(*args, **options):
        calls.append(args)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return loss(*args, **options)

    monkeypatch.setattr(distill, "dspark_loss", cut_at_the_fourth_step)
    with pytest.raises(KeyboardInterrupt):
        distill_draft(tiny_pair.target, resumed, config, checkpoints=checkpoints)
    monkeypatch.undo()
    distill_draft(tiny_pair.target, resumed, config, checkpoints=checkpoints)
    assert sha256_file(resumed / DRAFT_WEIGHTS) == sha256_file(whole / DRAFT_WEIGHTS)
    with pytest.raises(ValueError, match=r"distill\.steps: saved 4, now 5"):
        distill_draft(tiny_pair.target, resumed, DistillConfig(pages=2, steps=5), checkpoints=checkpoints)


@pytest.mark.parametrize("options, message", [
    ({"pages": 0}, "pages=0"), ({"steps": 0}, "steps=0"), ({"max_new_tokens": 1}, "max_new_tokens=1"),
    ({"prompts": ()}, "prompts"), ({"learning_rate": 0.0}, "learning_rate=0.0"),
    ({"page_style": "poster"}, "page_style='poster'"), ({"anchors_per_sequence": -1}, "anchors_per_sequence=-1"),
    ({"alignment_weight": -1.0}, "alignment_weight=-1.0"), ({"alignment_weight": 1.0}, "needs page_style='typewriter'"),
    ({"calibration_pages": -1}, "calibration_pages=-1"), ({"unmoved_share": 1.5}, "unmoved_share=1.5"),
])
def test_invalid_distill_options_are_rejected(options, message):
    with pytest.raises(ValueError, match=message):
        DistillConfig(**options)


def test_a_draft_distilled_with_every_glyph_moved_records_the_options_it_did_before_the_unmoved_share(
        tmp_path, capsys):
    """A draft distilled with every glyph moved records the options drafts did before the share existed; a share is
    recorded once it is asked for, as the shipped recipe asks for one."""
    assert "unmoved_share" not in DistillConfig(**READING_DISTILL | {"unmoved_share": 0.0}).options()
    assert DistillConfig(**READING_DISTILL).options()["unmoved_share"] == 0.5  # the shipped recipe's
    from utils.tiny.__main__ import main as tiny_cli

    out = tmp_path / "cli"
    with pytest.raises(SystemExit) as refused:
        tiny_cli(["--out", str(out), "--distill", "--distill-unmoved-share", "1.5"])
    assert refused.value.code == 2
    assert "--distill-unmoved-share: 1.5 is out of range" in capsys.readouterr().err and not out.exists()


def _sequence(prompt_length: int, answer: list[int], image_positions: list[int], token_cells: list[int] | None = None):
    from utils.tiny.distill_data import DistillSequence

    tokens = torch.tensor([0] * prompt_length + answer)
    cells = torch.tensor(token_cells if token_cells is not None else range(len(answer)))
    return DistillSequence(tokens, torch.zeros(len(tokens), 6), prompt_length, torch.tensor(image_positions), cells)


def test_a_block_position_is_aligned_with_the_image_token_where_its_label_starts():
    """The label of block position j at the anchor that is answer token i is answer token i + 1 + j, and the draft
    is told the image token of the cell where it starts: with one token per cell, image token i + 1 + j (none past
    the page's last); with merges, the cells its reading says (a token of two characters moves the next one by two),
    none where the reading does not say."""
    sequence = _sequence(6, [10, 11, 12, 13], image_positions=[1, 2, 3, 4])
    batch = anchor_batch([sequence], block_size=3, mask_token_id=99)
    assert batch.anchor_positions.tolist() == [[6, 7, 8]]
    assert batch.labels.tolist() == [[[11, 12, 13], [12, 13, 0], [13, 0, 0]]]
    assert batch.glyph_positions.tolist() == [[[2, 3, 4], [3, 4, -1], [4, -1, -1]]]
    short = anchor_batch([_sequence(6, [10, 11, 12, 13], image_positions=[1, 2])], block_size=3, mask_token_id=99)
    assert short.glyph_positions.tolist() == [[[2, -1, -1], [-1, -1, -1], [-1, -1, -1]]]
    merged = _sequence(6, [10, 11, 12, 13], image_positions=[20, 21, 22, 23, 24, 25], token_cells=[0, 2, -1, 5])
    assert anchor_batch([merged], block_size=3, mask_token_id=99).glyph_positions.tolist() == [
        [[22, -1, 25], [-1, 25, -1], [25, -1, -1]]]


def test_the_cells_of_a_reading_are_where_each_token_starts_on_its_page():
    """Unpadded rows and merged tokens: a token starts in the cell of its first character, a line break in its row's
    blank last column, EOS in the page's last cell; a reading that does not fit its page, or an image that is no
    page of whole cells, says nothing (-1)."""
    from PIL import Image

    from utils.pages.typewriter import CELL
    from utils.tiny.distill_data import answer_token_cells
    from utils.tiny.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(768)
    page = Image.new("L", (5 * CELL, 3 * CELL))  # 3 rows of 4 characters, then the blank last column
    text = "the\nend"
    answer = tokenizer(text, add_special_tokens=False).input_ids
    pieces = [tokenizer.decode([token]) for token in answer]
    assert any(len(piece) > 1 for piece in pieces)  # merges
    cells = answer_token_cells(tokenizer, [*answer, tokenizer.eos_token_id], page).tolist()
    offset = 0
    for piece, cell in zip(pieces, cells):
        assert cell == [0, 1, 2, 4, 5, 6, 7][offset], (piece, cell)
        offset += len(piece)
    assert cells[-1] == 14 and len(cells) == len(answer) + 1
    assert answer_token_cells(tokenizer, answer, page).tolist() == cells[:-1]  # a reading cut before EOS
    assert set(answer_token_cells(tokenizer, tokenizer("toolong\nx", add_special_tokens=False).input_ids,
                                  page).tolist()) == {-1}
    assert set(answer_token_cells(tokenizer, answer, Image.new("L", (5 * CELL + 3, 3 * CELL))).tolist()) == {-1}


def test_anchors_are_drawn_at_random_and_in_order_when_limited():
    sequence = _sequence(3, list(range(20, 40)), image_positions=list(range(1, 3)))
    limited = anchor_batch([sequence], block_size=2, mask_token_id=99, anchors_per_sequence=5,
                     generator=torch.Generator().manual_seed(1))
    positions = limited.anchor_positions[0].tolist()
    assert len(positions) == 5 and positions == sorted(set(positions)) and positions != list(range(3, 8))
    assert all(3 <= p < 3 + 19 for p in positions)
    assert limited.block_ids[0, :, 0].tolist() == [sequence.token_ids[p].item() for p in positions]


def test_alignment_loss_is_low_when_the_draft_looks_at_the_glyph_and_ignores_unshown_labels():
    from utils.tiny.distill import alignment_loss

    glyphs = torch.tensor([[[2, -1]]])  # [N=1, A=1, B=2]: position 1's label is past the page
    looking = torch.zeros(1, 2, 1, 2, 5)  # [N, heads, A, B, S]
    looking[..., 2] = 1.0
    looking[..., 1, :] = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0])  # an unshown label may look anywhere
    uniform = torch.full((1, 2, 1, 2, 5), 0.2)
    assert alignment_loss([looking], glyphs).item() == pytest.approx(0.0, abs=1e-5)
    assert alignment_loss([uniform, looking], glyphs).item() == pytest.approx(0.0, abs=1e-5)  # the last layer's
    assert alignment_loss([looking, uniform], glyphs).item() == pytest.approx(-np.log(0.2), rel=1e-4)
    assert alignment_loss([uniform], torch.full((1, 1, 2), -1)).item() == 0.0
