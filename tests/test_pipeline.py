"""Speculative OCR on OpenVINO Runtime: lossless against target-only decoding of the same IR, and clear errors."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from oracle import ORACLE_CASES, NoisyAnswer
from utils.pages.samples import SAMPLE_PROMPTS as PROMPTS
from utils.engine.step_cost import StepCost
from utils.pages.reading_pages import sample_pages
from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

PAGES = sample_pages()


@pytest.fixture(scope="module")
def pipelines(tiny_ir):
    target, draft = tiny_ir
    baseline = SpeculativeOcrPipeline(target, device="CPU", precision="f32")
    speculative = SpeculativeOcrPipeline(target, draft, device="CPU", precision="f32")
    return baseline, speculative


@pytest.fixture(scope="module")
def answer(pipelines):
    """Target-only greedy tokens of (page, prompt) for a budget, cached."""
    baseline, _ = pipelines

    @functools.cache
    def run(page: int, prompt: int, max_new_tokens: int) -> tuple[int, ...]:
        return tuple(baseline.generate(PAGES[page].image, PROMPTS[prompt], max_new_tokens=max_new_tokens).tokens)

    return run


def _check_metrics(result, *, num_assistant_tokens):
    metrics = result.metrics
    assert sum(accepted + 1 for accepted in metrics.accepted_per_step) == len(result.tokens)
    assert metrics.num_steps == len(metrics.steps) and metrics.steps[0].drafted == ()
    assert all(len(step.drafted) <= num_assistant_tokens for step in metrics.steps)
    assert 0 < metrics.ttft <= metrics.total
    assert sum(metrics.time_breakdown.values()) == pytest.approx(metrics.total, rel=1e-6, abs=1e-6)
    assert 0 < metrics.openvino_seconds <= metrics.total


DSPARK_CASES = [(page, page % 2, k) for page, k in zip(range(10), [8, 3, 7, 1, 8, 5, 2, 8, 4, 6])]


@pytest.mark.parametrize("page, prompt, num_assistant_tokens", DSPARK_CASES)
def test_dspark_output_equals_target_only(pipelines, answer, page, prompt, num_assistant_tokens):
    """A random draft: every block length, both prompts, the default Top-K scorer (the dense walk proposed the same
    drafts on every case); the trained draft meets the invariant in tests/test_lossless_trained_draft.py."""
    _, speculative = pipelines
    result = speculative.generate(PAGES[page].image, PROMPTS[prompt], max_new_tokens=40,
                                  num_assistant_tokens=num_assistant_tokens)
    assert tuple(result.tokens) == answer(page, prompt, 40)
    _check_metrics(result, num_assistant_tokens=num_assistant_tokens)


@pytest.mark.parametrize("page, prompt, seed, error_rate, num_assistant_tokens, max_new_tokens", ORACLE_CASES)
def test_partial_and_full_acceptance_equal_target_only(tiny_ir, answer, page, prompt, seed, error_rate,
                                                       num_assistant_tokens, max_new_tokens):
    expected = answer(page, prompt, max_new_tokens)
    oracle = NoisyAnswer(expected, seed=seed, error_rate=error_rate)
    pipeline = SpeculativeOcrPipeline(tiny_ir[0], device="CPU", precision="f32", proposer=oracle, block_size=8)
    result = pipeline.generate(PAGES[page].image, PROMPTS[prompt], max_new_tokens=max_new_tokens,
                               num_assistant_tokens=num_assistant_tokens, confidence_threshold=0.0)  # verify all
    assert tuple(result.tokens) == expected
    _check_metrics(result, num_assistant_tokens=num_assistant_tokens)
    if error_rate == 0.0:  # every step but the last emits a whole block: rollback never needed, state must hold
        assert [len(step.emitted) for step in result.metrics.steps[1:-1]] == \
            [num_assistant_tokens + 1] * (result.metrics.num_steps - 2)
    else:
        assert any(0 < step.accepted < len(step.drafted) for step in result.metrics.steps)  # partial rollbacks


@pytest.fixture(scope="module")
def transformers_target(tiny_pair):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    return (AutoModelForImageTextToText.from_pretrained(tiny_pair.target).eval(),
            AutoProcessor.from_pretrained(tiny_pair.target))


@pytest.mark.parametrize("page, prompt", [(0, 0), (4, 1), (6, 0)])
def test_speculative_output_equals_the_pytorch_target(pipelines, transformers_target, page, prompt):
    model, processor = transformers_target
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPTS[prompt]}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(images=[PAGES[page].image], text=[text], return_tensors="pt")
    expected = model.generate(**inputs, max_new_tokens=32, do_sample=False)[0, inputs["input_ids"].shape[1]:].tolist()
    result = pipelines[1].generate(PAGES[page].image, PROMPTS[prompt], max_new_tokens=32)
    assert result.tokens == expected
    assert result.texts[0] == processor.tokenizer.decode(expected, skip_special_tokens=True)


def test_markov_head_off_drafts_each_positions_own_best_token_and_keeps_the_output(pipelines, answer):
    """DSpark without its Markov walk (DFlash's per-position argmax) is the Top-1 scorer; the target's text stays."""
    _, speculative = pipelines
    drafts = {}
    for name, options in {"off": dict(markov_head=False), "top-1": dict(markov_head_top_k=1),
                          "dense": dict(markov_head_top_k=0)}.items():
        result = speculative.generate(PAGES[0].image, PROMPTS[0], max_new_tokens=24, confidence_threshold=0.0,
                                      **options)
        assert tuple(result.tokens) == answer(0, 0, 24), name
        drafts[name] = [step.drafted for step in result.metrics.steps]
    assert drafts["off"] == drafts["top-1"]
    assert drafts["off"] != drafts["dense"]  # the walk moves the random draft's choices: the switch is not a no-op
    with pytest.raises(ValueError, match="markov_head_top_k=0 chooses a Markov walk, and the Markov head is off"):
        speculative.generate(PAGES[0].image, markov_head=False, markov_head_top_k=0)


def test_streamed_text_is_the_final_text(pipelines, answer):
    pieces = []
    result = pipelines[1].generate(PAGES[2].image, PROMPTS[0], max_new_tokens=30, streamer=pieces.append)
    assert "".join(pieces) == result.texts[0] and len(pieces) > 1


@pytest.mark.parametrize("cost", [None, StepCost(fixed_ms=10, per_draft_ms=2)])
def test_confidence_threshold_keeps_the_output(tiny_ir, answer, cost):
    expected = answer(4, 0, 48)
    pipeline = SpeculativeOcrPipeline(tiny_ir[0], device="CPU", precision="f32", block_size=8,
                                      proposer=NoisyAnswer(expected, seed=3, error_rate=0.1))
    result = pipeline.generate(PAGES[4].image, PROMPTS[0], max_new_tokens=48, confidence_threshold=0.5,
                               step_cost=cost)
    assert tuple(result.tokens) == expected
    assert any(len(step.drafted) < 8 for step in result.metrics.steps[1:])
    for step in result.metrics.steps[1:]:  # what was not verified is recorded as cut, with its confidences
        assert len(step.drafted) + len(step.cut) == 8 and len(step.cut_confidences) == len(step.cut)
        proposed = step.confidences + step.cut_confidences
        confident = next((index for index, c in enumerate(proposed) if c < 0.5), 8)  # the threshold's prefix
        expected = confident if cost is None else cost.best_prefix_length(proposed[:confident])
        assert len(step.drafted) == expected


def test_bad_input_fails_clearly(pipelines, tmp_path):
    _, speculative = pipelines
    (tmp_path / "page.png").write_bytes(b"not an image at all")
    with pytest.raises(ValueError, match="not an image"):
        speculative.generate(tmp_path / "page.png")
    with pytest.raises(ValueError, match="prompt is empty"):
        speculative.generate(PAGES[0].image, "  ")
    with pytest.raises(ValueError, match=r"num_assistant_tokens=9 must be in \[1, 8\]"):
        speculative.generate(PAGES[0].image, num_assistant_tokens=9)
    with pytest.raises(ValueError, match="max_new_tokens=0"):
        speculative.generate(PAGES[0].image, max_new_tokens=0)


@pytest.mark.parametrize("options, message", [
    ({"target_layer_ids": (0, 2)}, "exported for layers"),
    ({"hidden_size": 32}, "hidden_size=32 but the target's is 64"),
])
def test_draft_exported_for_another_target_is_rejected(tiny_ir, tmp_path, options, message):
    from utils.export.draft import export_draft
    from utils.tiny import TinyPairConfig, build_tiny_pair

    other = build_tiny_pair(tmp_path / "other", TinyPairConfig(**options))
    draft = export_draft(other.draft, tmp_path / "other-draft")
    with pytest.raises(ValueError, match=message):
        SpeculativeOcrPipeline(tiny_ir[0], draft, device="CPU")


def test_command_line_prints_text_and_metrics_as_json(tiny_ir, tmp_path, capsys):
    from utils.ocr import main

    PAGES[5].image.save(tmp_path / "letter.png")
    assert main([str(tmp_path / "letter.png"), "--target", str(tiny_ir[0]), "--draft", str(tiny_ir[1]),
                 "--max-new-tokens", "20", "--json", "--device", "CPU"]) == 0
    printed = json.loads(capsys.readouterr().out)
    same_settings = SpeculativeOcrPipeline(tiny_ir[0], tiny_ir[1], device="CPU")  # the CLI's default precision
    expected = same_settings.generate(tmp_path / "letter.png", max_new_tokens=20)
    assert printed["tokens"] == expected.tokens and printed["text"] == expected.texts[0]
    assert printed["metrics"]["num_generated_tokens"] == len(expected.tokens)


def test_command_line_markov_head_off_drafts_with_the_per_position_argmax(tiny_ir, tmp_path, capsys):
    """--markov-head off is the pipeline's Top-1 scorer, for one page and in an archive's recorded settings."""
    from utils.engine.draft import PER_POSITION_ARGMAX
    from utils.ocr import main

    PAGES[0].image.save(tmp_path / "page.png")
    common = [str(tmp_path / "page.png"), "--target", str(tiny_ir[0]), "--draft", str(tiny_ir[1]),
              "--max-new-tokens", "24", "--device", "CPU", "--precision", "f32", "--confidence-threshold", "0"]
    assert main(common + ["--markov-head", "off", "--out", str(tmp_path / "r.jsonl"), "--quiet"]) == 0
    (record,) = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert record["settings"]["markov_head_top_k"] == PER_POSITION_ARGMAX
    exact = SpeculativeOcrPipeline(tiny_ir[0], tiny_ir[1], device="CPU", precision="f32")
    expected = exact.generate(tmp_path / "page.png", max_new_tokens=24, confidence_threshold=0.0, markov_head=False)
    assert record["text"] == expected.texts[0] and record["steps"] == expected.metrics.num_steps
    with pytest.raises(SystemExit):
        main(common + ["--markov-head", "off", "--markov-head-top-k", "0"])
    assert "--markov-head-top-k 0 chooses a Markov walk, and --markov-head is off" in capsys.readouterr().err


@pytest.mark.parametrize("page", [0, 7, "noise"])
def test_command_line_at_f32_gives_the_target_only_tokens_and_says_its_precision(tiny_ir, tmp_path, capsys, page):
    from PIL import Image

    from utils.ocr import main

    image = tmp_path / "page.png"
    if page == "noise":  # not a document at all: the invariant does not care
        pixels = np.random.default_rng(0).integers(0, 256, size=(90, 160, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(image)
    else:
        PAGES[page].image.save(image)
    common = [str(image), "--target", str(tiny_ir[0]), "--max-new-tokens", "40", "--json", "--device", "CPU",
              "--precision", "f32"]
    printed = []
    for draft in (str(tiny_ir[1]), "none"):
        assert main(common + ["--draft", draft]) == 0
        printed.append(json.loads(capsys.readouterr().out))
    speculative, alone = printed
    assert speculative["tokens"] == alone["tokens"] and speculative["text"] == alone["text"]
    assert speculative["precision"] == alone["precision"] == "f32"
    assert speculative["inference_precision"] == "f32"
    # the draft ran at the device's own precision (bf16 where the CPU has it) and the output did not move
    assert speculative["draft_precision"] == "default" and speculative["draft_inference_precision"] in ("bf16", "f32")
    with pytest.raises(SystemExit):  # argparse refuses a precision it does not offer
        main(common[:-1] + ["bf17"])


def test_stop_set_reads_every_eos_field_and_the_end_of_turn_token(tiny_pair, tmp_path):
    import shutil

    from utils.contract.target import read_stop_token_ids

    folder = tmp_path / "target"
    shutil.copytree(tiny_pair.target, folder)
    im_end = next(token["id"] for token in json.loads((folder / "tokenizer.json").read_text())["added_tokens"]
                  if token["content"] == "<|im_end|>")
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 9]}))
    config = json.loads((folder / "config.json").read_text())
    config["eos_token_id"] = 11  # top level, as MiniCPM-V 4.6 writes it
    config["text_config"].pop("eos_token_id", None)
    (folder / "config.json").write_text(json.dumps(config))
    assert read_stop_token_ids(folder) == tuple(sorted({7, 9, 11, im_end}))
    (folder / "generation_config.json").unlink()
    config.pop("eos_token_id")
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="never stop"):
        read_stop_token_ids(folder)


def test_the_target_folder_is_read_once_and_each_part_gets_its_share(pipelines, tiny_ir, monkeypatch):
    """`ExportedTarget` reads the folder's files; the parts hold the very objects it read, not re-read copies."""
    import utils.contract.processor as processor_files
    import utils.contract.target as target_files
    from utils.contract.target import ExportedTarget

    reads = []
    original = processor_files.read_json
    for module in (processor_files, target_files):
        monkeypatch.setattr(module, "read_json", lambda path: reads.append(path.name) or original(path))
    target = ExportedTarget.read(tiny_ir[0])
    assert {"config.json", "processor_config.json", "tokenizer_config.json"} <= set(reads)
    assert sorted(set(reads)) == sorted(reads)  # no file parsed twice
    config = json.loads((tiny_ir[0] / "config.json").read_text())
    assert (target.image_token_id, target.hidden_size) == (config["image_token_id"],
                                                           config["text_config"]["hidden_size"])
    _, speculative = pipelines
    shared = speculative.target
    assert speculative.preprocess.config is shared.processor.image_processor
    assert speculative.build_prompt.tokens is shared.processor.tokens
    assert speculative.language_model.config is shared.language_model
    assert speculative.eos_token_ids is shared.stop_token_ids and speculative.image_token_id == shared.image_token_id


def test_a_target_folder_without_an_image_token_is_refused_in_one_line(tiny_ir, tmp_path):
    import shutil

    from utils.contract.target import ExportedTarget

    folder = shutil.copytree(tiny_ir[0], tmp_path / "target")
    config = json.loads((folder / "config.json").read_text())
    config.pop("image_token_id")
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config\.json: field 'image_token_id' is missing"):
        ExportedTarget.read(folder)


def test_image_settings_that_overflow_the_context_are_refused_at_load(tiny_ir, tmp_path):
    import shutil

    folder = shutil.copytree(tiny_ir[0], tmp_path / "target")
    config = json.loads((folder / "processor_config.json").read_text())
    config["image_processor"]["max_slice_nums"] = 1000
    (folder / "processor_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"processor_config\.json: max_slice_nums=1000 lets one page take up to \d+ "
                                         r"image tokens.*supported: max_slice_nums <= \d+"):
        SpeculativeOcrPipeline(folder, device="CPU")


def test_a_processor_config_in_another_downsample_mode_than_the_vision_ir_is_refused_at_load(tiny_ir, tmp_path):
    import shutil

    folder = shutil.copytree(tiny_ir[0], tmp_path / "target")
    config = json.loads((folder / "processor_config.json").read_text())
    config["image_processor"]["downsample_mode"] = "16x"
    (folder / "processor_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"processor_config\.json: downsample_mode='16x', but .*vision_embeddings"
                                         r"_model\.xml was exported with downsample_mode='4x'"):
        SpeculativeOcrPipeline(folder, device="CPU")


def test_unknown_precision_is_refused_with_the_choices(tiny_ir):
    with pytest.raises(ValueError, match=r"precision='bf17'.*\['f32', 'default'\]"):
        SpeculativeOcrPipeline(tiny_ir[0], device="CPU", precision="bf17")


def test_int8_target_speculative_output_equals_its_target_only_output(tiny_ir, tmp_path):
    """INT8 weights change the text, but not the invariant (F32_PROPERTIES turns off dynamic quantization, which
    at real size made a block and the same tokens one by one round differently)."""
    from utils.export.compression import compress_folder

    int8 = compress_folder(tiny_ir[0], tmp_path / "target-int8", weight_format="int8")
    baseline = SpeculativeOcrPipeline(int8, device="CPU", precision="f32")
    expected = tuple(baseline.generate(PAGES[4].image, PROMPTS[0], max_new_tokens=40).tokens)
    pipeline = SpeculativeOcrPipeline(int8, device="CPU", precision="f32", block_size=8,
                                      proposer=NoisyAnswer(expected, seed=1, error_rate=0.2))
    result = pipeline.generate(PAGES[4].image, PROMPTS[0], max_new_tokens=40, confidence_threshold=0.0)
    assert tuple(result.tokens) == expected
    assert any(0 < step.accepted < len(step.drafted) for step in result.metrics.steps)


def test_target_export_refuses_an_existing_folder_before_converting(tiny_pair, tmp_path, monkeypatch):
    import transformers

    from utils.export.target import export_target

    (tmp_path / "out").mkdir()
    monkeypatch.setattr(transformers.AutoModelForImageTextToText, "from_pretrained",
                        lambda *args, **kwargs: pytest.fail("the model was loaded before the check"))
    for weight_format in ("fp32", "int8"):
        with pytest.raises(FileExistsError, match="already exists"):
            export_target(tiny_pair.target, tmp_path / "out", draft=tiny_pair.draft, weight_format=weight_format)


def _typewriter_reader(tiny_ir, tmp_path):
    """The tiny IR target marked as a typewriter reader, as `utils.tiny.reader.mark_typewriter_reader` marks one."""
    import shutil

    from utils.contract.target import TYPEWRITER_PAGE
    from utils.pages.typewriter import CELL, PAGE_ROWS, PAGE_WIDTH

    folder = shutil.copytree(tiny_ir[0], tmp_path / "target")
    config = json.loads((folder / "config.json").read_text())
    config[TYPEWRITER_PAGE] = {"rows": PAGE_ROWS, "columns": PAGE_WIDTH, "cell": CELL}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.slow
def test_a_typewriter_reader_stops_at_its_page_and_names_an_image_of_another_shape(tiny_ir, tmp_path, capsys):
    """Its answer is one token per image token, so a reading stops TYPEWRITER_SLACK tokens past the page's image
    tokens; an image of another size gets one line saying what the tiny pair reads and how to read the rest (in the
    result and on the command line). A target without the field keeps the budget and says nothing."""
    from utils.ocr import main
    from utils.pipeline.speculative_ocr import TYPEWRITER_SLACK

    # Without a stop token both run to what stops them: the budget, or the reader's cut (whatever the random
    # target writes, so the test holds on any machine).
    baseline = SpeculativeOcrPipeline(tiny_ir[0], device="CPU", precision="f32")
    reader = SpeculativeOcrPipeline(_typewriter_reader(tiny_ir, tmp_path), device="CPU", precision="f32")
    baseline.eos_token_ids = reader.eos_token_ids = ()
    page, other = PAGES[0].image, PAGES[0].image.crop((0, 0, 17 * 28, 3 * 28))
    for image, notice in ((page, False), (other, True)):
        cells = reader.preprocess(image).num_image_tokens
        unlimited, read = baseline.generate(image, max_new_tokens=400), reader.generate(image, max_new_tokens=400)
        assert len(unlimited.tokens) == 400 and read.tokens == unlimited.tokens[:cells + TYPEWRITER_SLACK]
        assert unlimited.notice == "" and bool(read.notice) is notice
    assert "the tiny pair reads only typewriter pages of 6 rows x 26 characters" in read.notice
    assert "docs/real-checkpoints.md" in read.notice and "\n" not in read.notice
    other.save(tmp_path / "other.png")
    assert main([str(tmp_path / "other.png"), "--target", str(tmp_path / "target"), "--max-new-tokens", "8"]) == 0
    assert read.notice in capsys.readouterr().err


@pytest.mark.parametrize("field", [{"rows": 6}, {"rows": "six", "columns": 26, "cell": 28}, [6, 26, 28],
                                   {"rows": 0, "columns": 26, "cell": 28}])
def test_a_malformed_typewriter_page_field_is_refused_with_its_name(tiny_ir, tmp_path, field):
    from utils.contract.target import TYPEWRITER_PAGE, ExportedTarget

    folder = _typewriter_reader(tiny_ir, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config[TYPEWRITER_PAGE] = field
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=rf"config\.json: {TYPEWRITER_PAGE} must hold"):
        ExportedTarget.read(folder)
