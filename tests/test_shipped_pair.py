"""The default pair ships as files: it matches its manifest and the shipped recipe, reads the page, and drafts."""

from __future__ import annotations

import json
import shutil

import pytest

from utils.evaluation.character_error_rate import character_error_rate
from utils.pages.reading_pages import sample_pages
from utils.pages.typewriter import CELL
from utils.pipeline.speculative_ocr import TYPEWRITER_SLACK
from utils.tiny import BUILD_STAMP, SHIPPED_PAIR_DIR, default_pair
from utils.tiny.acceptance import measure_acceptance
from utils.tiny.manifest import HELD_OUT_WALKS as WALKS
from utils.tiny.manifest import MANIFEST, REBUILD_COMMAND, confidence_figures, pair_files, read_manifest
from utils.tiny.pair import build_stamp, shipped_recipe
from utils.tiny.reading_report import held_out_pages


@pytest.fixture(scope="module")
def manifest():
    return read_manifest(SHIPPED_PAIR_DIR)


def test_default_pair_is_the_shipped_pair_built_by_the_shipped_recipe(manifest):
    pair, recipe = default_pair(), shipped_recipe()
    assert pair.root == SHIPPED_PAIR_DIR
    assert (pair.config, pair.read, pair.distill, pair.pretrain) == (recipe["config"], recipe["read"],
                                                                     recipe["distill"], None)
    assert manifest["build"] == build_stamp(**recipe) == json.loads((SHIPPED_PAIR_DIR / BUILD_STAMP).read_text()), \
        "the recipe changed: rebuild the shipped pair with " + manifest["command"]
    assert manifest["command"] == REBUILD_COMMAND
    assert set(manifest["files"]) == set(pair_files(SHIPPED_PAIR_DIR))


def test_two_held_out_pages_read_again_give_the_manifest_readings(manifest):
    """The manifest's figures are of these files: two of its held-out pages, read again by the target alone at f32
    (the reading every CPU gives), are the texts it recorded. The first page, and the one it read worst of the
    generated and random pages (an error read again the same way pins the weights better than a right answer any
    good reader gives)."""
    from utils.models import default_ir_pair
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    reading = manifest["reading"]
    recorded = [*reading["target_only"]["f32"]["readings"], *reading["target_only"]["f32"]["random_readings"]]
    generated, random = held_out_pages(reading["pages"])
    pages = [*generated, *random]
    worst = max(range(len(pages)), key=lambda index: character_error_rate([(recorded[index], pages[index].text)]))
    assert character_error_rate([(recorded[worst], pages[worst].text)]) > 0, "no page read wrong: pick another"
    alone = SpeculativeOcrPipeline(default_ir_pair()[0], device="CPU", precision="f32")
    assert [alone.generate(pages[index].image).texts[0] for index in (0, worst)] == [recorded[0], recorded[worst]]


def test_the_shipped_pair_met_the_ship_bounds_when_it_was_built(manifest):
    """The figures the build measured through OpenVINO (`measure_reading`), against the bounds a pair must meet to
    ship (issue 34's table): it reads held-out generated pages, random strings, pages written by hand and pages with
    blank or short rows, keeps its place (rows neither repeated nor skipped), reads each page differently, keeps its
    answer at the device's default precision, and drafts at the CLI's defaults and at f32. The written pages' CER is
    read again below; that speculative decoding writes the target's tokens is measured again by
    tests/test_lossless_trained_draft.py, not read from here; that the record is of these files, by the test above.
    How the confidence head ranks is the next test's."""
    reading = manifest["reading"]
    pages, cli = reading["pages"], reading["cli_defaults"]
    exact = reading["f32_every_draft_verified"]
    random, written, sparse = reading["random_pages"], reading["written_pages"], reading["sparse_pages"]
    assert pages >= 40 and reading["split"] == "held-out"
    assert cli["cer"] <= 0.02 and exact["top_k_scorer"]["cer"] <= 0.02
    assert random["cer"] <= 0.03 and sparse["cer"] <= 0.03
    read = pages + random["pages"] + len(written["readings"]) + sparse["pages"]
    slips = cli["row_slips"] + random["row_slips"] + written["row_slips"] + sparse["row_slips"]
    assert cli["row_slips"] <= 1 and 40 * slips <= read  # at most one page in 40 loses its place
    assert cli["distinct_answers"] == pages
    assert reading["pages_equal_at_default_and_f32"] >= 0.9 * pages
    assert cli["tokens_per_step"] >= 5.0 and random["tokens_per_step"] >= 3.0
    assert exact["top_k_scorer"]["tokens_per_step"] >= 5.0
    shape = reading["another_shape"]
    cells = (shape["image_size"][0] // CELL) * (shape["image_size"][1] // CELL)  # one image token per cell
    assert shape["notice"] and shape["tokens"] <= cells + TYPEWRITER_SLACK
    training = manifest["training"]["reading"]
    assert training["held_out_cer"] <= 0.02  # its training time is this machine's: docs/tiny-pair.md states it


def test_the_shipped_pairs_confidence_head_ranks_rejected_drafts(manifest):
    """Issue 35's goal, AUC 0.85, over enough rejections to mean something: at every anchor of the target's answers
    to the held-out generated and random pages (`confidence_figures`), at least 100 rejected drafts, so one more or
    less moves the AUC by at most 0.01. The readings' AUCs rest on the drafts a reading meets, and on the 40 generated
    pages the shipped draft is rejected once in 5,760 scored drafts: that AUC ranks one draft, so it bounds nothing
    (the random pages, where readings meet enough rejections, are the next test's)."""
    confidence = manifest["confidence"]
    assert confidence["pages"] == manifest["reading"]["pages"] + manifest["reading"]["random_pages"]["pages"]
    assert confidence["rejected"] >= 100 and confidence["auc"] >= 0.85


@pytest.mark.xfail(strict=True, reason="a goal the shipped pair misses (docs/tiny-pair.md): in readings, the head "
                                      "ranks the random pages' rejections below 0.85; strict, so a pair that meets "
                                      "it must remove this mark")
def test_the_shipped_pairs_confidence_head_ranks_the_rejections_a_reading_meets(manifest):
    """Issue 35's goal where readings meet enough rejections to rank: the random pages at the CLI's defaults."""
    random = manifest["reading"]["random_pages"]
    assert random["rejected_drafts"] >= 50 and random["confidence_auc"] >= 0.85


@pytest.fixture(scope="module")
def readings():
    """The sample pages read through OpenVINO at f32 (every draft verified) and by the target alone."""
    from utils.models import default_ir_pair
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    target, draft = default_ir_pair()
    speculative = SpeculativeOcrPipeline(target, draft, device="CPU", precision="f32", draft_precision="f32")
    alone = SpeculativeOcrPipeline(target, device="CPU", precision="f32")
    pages = sample_pages()
    return (pages, [speculative.generate(page.image, confidence_threshold=0.0) for page in pages],
            [alone.generate(page.image) for page in pages])


SHIP_CER = 0.02  # issue 34's ship bound for generated pages (docs/tiny-pair.md); 3% for pages written by hand
WRITTEN_SHIP_CER = 0.03
WORST_PAGE_GOAL = 0.03  # issue 48's goal for any one page


def test_the_shipped_pair_met_issue_48s_goals_on_the_hard_pages_when_it_was_built(manifest):
    """Look-alike glyphs at every size and rows of digits, as the build read them at the CLI's defaults
    (`python -m benchmarks.hard_pages` reads them again): every look-alike class read right 99% of the time, the
    digit grids at 1% CER and 4.5 tokens per step, none running to the budget or losing its place. The pair shipped
    before issue 48: `({[` 82.0%, grids 8.9% at 2.30 tokens per step, 2 at the budget."""
    hard = manifest["reading"]["hard_pages"]
    look, grids = hard["look_alikes"], hard["digit_grids"]
    assert look["pages"] == 21 and grids["pages"] == 20
    assert min(look["accuracy_by_class"].values()) >= 0.99, look["confusions"]
    assert grids["cer"] <= 0.01 and grids["tokens_per_step"] >= 4.5
    assert grids["reached_budget"] == look["reached_budget"] == 0 and grids["row_slips"] == 0


@pytest.mark.slow
def test_the_shipped_pair_reads_the_sample_pages(readings):
    """What a newcomer sees first: every sample page read, each differently, the draft accepted for several tokens
    a step (the ship bound, 5), and the speculative text the target's own (f32)."""
    from utils.engine.verification import mean_tokens_per_step

    pages, speculative, alone = readings
    texts = [result.texts[0] for result in speculative]
    assert texts == [result.texts[0] for result in alone]
    assert len(set(texts)) == len(pages)
    steps = [step for result in speculative for step in result.metrics.steps]
    assert mean_tokens_per_step(steps) >= 5.0


@pytest.mark.slow
def test_the_shipped_pair_reads_the_sample_pages_within_the_bounds(readings):
    """The ship bound over all sample pages, and the goal for each. Measured at f32: 0.0% on each of the ten (the
    pair shipped before issue 48: 2.7%, the numbers page 13.7% and the receipt 11.2%, each run on past a row)."""
    pages, speculative, _ = readings
    texts = [result.texts[0] for result in speculative]
    assert character_error_rate(zip(texts, (page.text for page in pages))) <= SHIP_CER
    assert all(character_error_rate([(text, page.text)]) <= WORST_PAGE_GOAL for page, text in zip(pages, texts))


@pytest.mark.slow
def test_the_shipped_target_answers_through_openvino_as_its_pytorch_model_does(readings):
    """Every dimension of its attention heads rotates (`partial_rotary_factor` 1.0, unlike the real target's 0.25):
    the exported graph must rotate them as transformers does. Greedy tokens equal at f32 on the first sample page."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from utils.pages.samples import SAMPLE_PROMPTS

    target = SHIPPED_PAIR_DIR / "target"
    assert json.loads((target / "config.json").read_text())["text_config"]["rope_parameters"]["partial_rotary_factor"] == 1.0
    model, processor = AutoModelForImageTextToText.from_pretrained(target).eval(), AutoProcessor.from_pretrained(target)
    pages, _, alone = readings
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": SAMPLE_PROMPTS[0]}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(images=[pages[0].image], text=[text], return_tensors="pt")
    expected = model.generate(**inputs, max_new_tokens=len(alone[0].tokens), do_sample=False)
    assert alone[0].tokens == expected[0, inputs["input_ids"].shape[1]:].tolist()


@pytest.fixture(scope="module")
def written_readings():
    """The pages written by hand, read through OpenVINO at f32 with every draft verified: (pages, texts)."""
    from utils.models import default_ir_pair
    from utils.pages.written_pages import written_pages
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    target, draft = default_ir_pair()
    speculative = SpeculativeOcrPipeline(target, draft, device="CPU", precision="f32", draft_precision="f32")
    pages = written_pages()
    return pages, [speculative.generate(page.image, confidence_threshold=0.0).texts[0] for page in pages]


@pytest.mark.slow
def test_the_shipped_pair_reads_pages_written_by_hand(written_readings):
    """Text no generator wrote (code, a bordered table, symbols, a shopping list, blank rows, ...): read, not
    recited, and rows in their place (the ship bound: one page in 40 repeats or skips a row; here none does)."""
    from utils.evaluation.character_error_rate import row_slip

    pages, texts = written_readings
    assert len(set(texts)) == len(pages)
    slips = [page.name for text, page in zip(texts, pages, strict=True) if row_slip(text, page.text)]
    assert len(slips) <= 1, slips


@pytest.mark.slow
def test_the_shipped_pair_reads_pages_written_by_hand_within_the_bounds(written_readings):
    """The CER pages written by hand ship at, and the goal for each page. Measured at f32: 0.09% (serials and
    formulas 0.6%, one glyph each; the other twelve 0). The pair shipped before issue 48: 3.2%, formulas 30%."""
    pages, texts = written_readings
    assert character_error_rate(zip(texts, (page.text for page in pages))) <= WRITTEN_SHIP_CER
    assert all(character_error_rate([(text, page.text)]) <= WORST_PAGE_GOAL for page, text in zip(pages, texts))


@pytest.mark.slow
def test_manifest_acceptance_figures_hold_when_measured_again(manifest):
    """The PyTorch reference on the sample pages, with the prompt the draft learnt: inference only, so the figures
    come back; a near-tie may move a token on another CPU, hence the tolerance instead of equality. The Top-K
    scorer only: the dense walk's figures are the same (the manifest records both), so it would repeat this."""
    held_out = manifest["held_out"]
    walk = "top_k_scorer"
    assert held_out["dense_walk"] == held_out[walk]
    figures = held_out[walk]
    report = measure_acceptance(SHIPPED_PAIR_DIR / "target", SHIPPED_PAIR_DIR / "draft", prompts=held_out["prompts"],
                                markov_head_top_k=WALKS[walk], max_new_tokens=held_out["max_new_tokens"])
    assert report.tokens_per_step == pytest.approx(figures["tokens_per_step"], abs=0.25)
    assert report.as_dict()["confidence_auc"] == (None if figures["confidence_auc"] is None
                                                  else pytest.approx(figures["confidence_auc"], abs=0.05))
    assert report.rejected_positions == pytest.approx(figures["rejected_positions"], abs=2)
    assert report.answers_ending_with_eos == figures["answers_ending_with_eos"]


@pytest.mark.slow
def test_manifest_confidence_figures_hold_when_measured_again(manifest):
    """The head's ranking at every anchor of the held-out answers, measured again in PyTorch: inference only, so
    the figures come back; a near-tie may move a token of an answer on another CPU, hence the tolerances."""
    figures, recorded = confidence_figures(SHIPPED_PAIR_DIR, manifest["build"]), manifest["confidence"]
    assert figures["positions"] == pytest.approx(recorded["positions"], rel=0.01)
    assert figures["rejected"] == pytest.approx(recorded["rejected"], rel=0.05)
    assert figures["auc"] == pytest.approx(recorded["auc"], abs=0.01)


@pytest.mark.parametrize("damage, message", [
    (lambda root: (root / "draft" / "model.safetensors").write_bytes(b"version https://git-lfs"),
     "draft/model.safetensors differs"),
    (lambda root: (root / "target" / "tokenizer.json").unlink(), "target/tokenizer.json is missing"),
    (lambda root: (root / "draft" / "notes.txt").write_text("x"), "draft/notes.txt is not in the manifest"),
    (lambda root: (root / MANIFEST).unlink(), "manifest.json is missing"),
])
def test_a_damaged_shipped_pair_is_refused_with_the_file_named(tmp_path, damage, message):
    root = tmp_path / "default"
    shutil.copytree(SHIPPED_PAIR_DIR, root)
    default_pair(root)
    damage(root)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        default_pair(root)
