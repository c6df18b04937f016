"""The real checkpoints' file layout, on the tiny pair rewritten as they publish it (`utils.tiny.published`).

Each test names the published detail it guards: top-level eos, the thinking switch, `extra_special_tokens` as a
dict, bf16 tensors, draft fields split between the top level and `dflash_config`, tensors real loaders skip,
adaptive upsizing and 16x merging. End to end: export (in the files' 16x, and in 4x with 9 slices, the model card's
serving recipe, chosen at export and recorded in the exported folder), `python -m utils.ocr` at f32 (speculative =
target only) and the helpers the notebooks call.
"""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest

from utils.pages.samples import printed_sample_pages
from utils.tiny.published import PUBLISHED_CHAT_TEMPLATE, write_published_layout

pytestmark = pytest.mark.slow  # exports the published layout and reads whole pages against transformers

PAGES = printed_sample_pages()  # document-like pages the published processor resizes (parity below)
RECIPE_SLICES = 9  # the model card's max_slice_nums


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """The shipped tiny pair in the published layout."""
    return write_published_layout(tmp_path_factory.mktemp("published") / "pair")


@pytest.fixture(scope="module")
def published_ir(published, tmp_path_factory):
    """The published-layout pair exported to fp32 IR: (target folder, draft folder)."""
    from utils.export.draft import export_draft
    from utils.export.target import export_target

    root = tmp_path_factory.mktemp("published-ir")
    draft = export_draft(published.draft, root / "draft")
    return export_target(published.target, root / "target", draft=published.draft, prefill_chunk=32), draft


@pytest.fixture(scope="module")
def published_ir_4x(published, published_ir, tmp_path_factory):
    """The published-layout target exported in 4x with 9 slices (the serving recipe; its files say 16x), and the
    same draft IR: (target folder, draft folder)."""
    from utils.export.target import export_target

    out = tmp_path_factory.mktemp("published-ir-4x") / "target"
    return export_target(published.target, out, draft=published.draft, prefill_chunk=32, downsample_mode="4x",
                         max_slice_nums=RECIPE_SLICES), published_ir[1]


def _exported(request, mode: str):
    """The exported published pair read in `mode`: the files' 16x, or 4x chosen at export."""
    return request.getfixturevalue("published_ir" if mode == "16x" else "published_ir_4x")


def _safetensors_dtypes(path) -> set[str]:
    header_size = int.from_bytes(path.read_bytes()[:8], "little")
    header = json.loads(path.read_bytes()[8:8 + header_size])
    return {info["dtype"] for name, info in header.items() if name != "__metadata__"}


def test_files_follow_the_published_layout(published):
    target = json.loads((published.target / "config.json").read_text())
    assert "eos_token_id" in target and "eos_token_id" not in target["text_config"]
    assert "eos_token_id" not in json.loads((published.target / "generation_config.json").read_text())
    assert target["text_config"]["vocab_size"] > len(json.loads((published.target / "tokenizer.json").read_text())
                                                     ["model"]["vocab"])  # padded vocabulary
    tokenizer_config = json.loads((published.target / "tokenizer_config.json").read_text())
    assert "image_token" not in tokenizer_config and "image_token" in tokenizer_config["extra_special_tokens"]
    processor = json.loads((published.target / "processor_config.json").read_text())["image_processor"]
    assert (processor["small_image_upsize"], processor["downsample_mode"]) == ("adaptive", "16x")
    draft = json.loads((published.draft / "config.json").read_text())
    assert "block_size" in draft and "block_size" not in draft["dflash_config"]
    assert "markov_rank" not in draft and "markov_rank" in draft["dflash_config"]
    assert draft["target_layer_ids"] == draft["dflash_config"]["target_layer_ids"]
    assert not {"enable_confidence_head", "confidence_head_with_markov"} & (set(draft) | set(draft["dflash_config"]))
    assert draft["vocab_size"] < target["text_config"]["vocab_size"]
    assert "BF16" in _safetensors_dtypes(published.draft / "model.safetensors")
    assert _safetensors_dtypes(published.target / "model.safetensors") == {"BF16"}


def test_the_prompt_is_rendered_in_non_thinking_mode_unless_asked(published):
    from utils.pipeline.preprocessing import ChatPromptBuilder

    placeholder = "<image>" + "<|image_pad|>" * 2 + "</image>"
    prompt = ChatPromptBuilder.from_pretrained(published.target)([placeholder], prompt="Text Recognition:")
    assert prompt == ("<|im_start|>user\n<image_id>0</image_id>" + placeholder + "Text Recognition:<|im_end|>\n"
                      "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    thinking = ChatPromptBuilder.from_pretrained(published.target, template_kwargs={"enable_thinking": True})
    assert thinking([placeholder]).endswith("<|im_start|>assistant\n<think>\n")


def test_the_stop_set_holds_the_top_level_eos_and_the_end_of_turn(published):
    from utils.contract.target import read_stop_token_ids

    added = {token["content"]: token["id"]
             for token in json.loads((published.target / "tokenizer.json").read_text())["added_tokens"]}
    assert read_stop_token_ids(published.target) == (added["<|endoftext|>"], added["<|im_end|>"])


def test_the_draft_loads_with_its_skipped_tensors_and_inferred_flags(published):
    from utils.checkpoint.draft import load_draft_checkpoint
    from utils.tiny import default_pair

    loaded, shipped = load_draft_checkpoint(published.draft), load_draft_checkpoint(default_pair().draft)
    assert loaded.config.defaulted == {"enable_confidence_head", "confidence_head_with_markov"}
    assert loaded.config.enable_confidence_head and loaded.config.confidence_head_with_markov
    assert not {"t2d", "mask_embedding"} & set(loaded.tensors)
    assert np.array_equal(loaded.target_ids, shipped.target_ids)
    for name, array in shipped.tensors.items():  # bf16 read back as float32: the shipped values, rounded
        np.testing.assert_allclose(loaded.tensors[name], array, rtol=2 ** -8, atol=0, err_msg=name)


def test_the_export_records_the_published_settings(published_ir):
    target, draft = published_ir
    processor = json.loads((target / "processor_config.json").read_text())["image_processor"]
    assert (processor["small_image_upsize"], processor["downsample_mode"]) == ("adaptive", "16x")
    assert (target / "chat_template.jinja").read_text() == PUBLISHED_CHAT_TEMPLATE  # kept, switch and all
    assert (draft / "local-to-target.json").is_file()


def test_the_chosen_image_settings_are_recorded_where_every_reader_looks(published, published_ir, published_ir_4x):
    import openvino as ov

    from utils.contract import DOWNSAMPLE_MODE_RT_INFO_KEY, TARGET_MANIFEST, VISION_EMBEDDINGS_NAME
    from utils.contract.target import ExportedTarget

    files = json.loads((published.target / "processor_config.json").read_text())["image_processor"]
    for folder, mode, slices, chosen_by in ((published_ir[0], "16x", files["max_slice_nums"], "files"),
                                           (published_ir_4x[0], "4x", RECIPE_SLICES, "option")):
        assert json.loads((folder / "config.json").read_text())["downsample_mode"] == mode
        processor = json.loads((folder / "processor_config.json").read_text())
        for section in ("image_processor", "video_processor"):
            assert (processor[section]["downsample_mode"], processor[section]["max_slice_nums"]) == (mode, slices)
        vision = ov.Core().read_model(folder / VISION_EMBEDDINGS_NAME)
        assert vision.get_rt_info(DOWNSAMPLE_MODE_RT_INFO_KEY).astype(str) == mode
        manifest = json.loads((folder / TARGET_MANIFEST).read_text())["image_processor"]
        assert manifest == {"downsample_mode": mode, "max_slice_nums": slices,
                            "chosen_by": {"downsample_mode": chosen_by, "max_slice_nums": chosen_by}}
        image_processor = ExportedTarget.read(folder).processor.image_processor
        assert (image_processor.downsample_mode, image_processor.max_slice_nums) == (mode, slices)


def test_the_real_checkpoint_is_exported_with_its_model_cards_recipe_unless_told(published, tmp_path):
    """A folder named as the published repository (where the download puts it, or the hub cache) gets 4x with 9
    slices, and the export says that it overrides the files; an explicit option wins; another folder keeps its files."""
    from utils.export.processor_settings import choose_processor_settings

    files = json.loads((published.target / "processor_config.json").read_text())["image_processor"]
    for name in ("MiniCPM-OCR-1.0", "models--openbmb--MiniCPM-OCR-1.0/snapshots/0123abc"):
        real = tmp_path / name
        shutil.copytree(published.target, real, ignore=shutil.ignore_patterns("*.safetensors"))
        said = []
        settings = choose_processor_settings(real, report=said.append)
        assert (settings.downsample_mode, settings.max_slice_nums) == ("4x", RECIPE_SLICES)
        assert settings.origin == ("openbmb/MiniCPM-OCR-1.0",) * 2
        assert len(said) == 1 and "model card" in said[0] and "downsample_mode='16x' -> '4x'" in said[0]
        chosen = choose_processor_settings(real, downsample_mode="16x", report=said.append)
        assert (chosen.downsample_mode, chosen.max_slice_nums, chosen.origin) == (
            "16x", RECIPE_SLICES, ("option", "openbmb/MiniCPM-OCR-1.0"))
    said = []
    own = choose_processor_settings(published.target, report=said.append)
    assert (own.downsample_mode, own.max_slice_nums, said) == ("16x", files["max_slice_nums"], [])
    torn = shutil.copytree(published.target, tmp_path / "torn", ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((torn / "config.json").read_text())
    (torn / "config.json").write_text(json.dumps(config | {"downsample_mode": "4x"}))
    with pytest.raises(ValueError, match=r"config.json says downsample_mode='4x', processor_config.json says '16x'"):
        choose_processor_settings(torn)
    assert choose_processor_settings(torn, downsample_mode="16x").downsample_mode == "16x"  # the option decides


def test_the_export_command_refuses_image_settings_it_cannot_serve_before_converting(published, tmp_path, capsys):
    from utils.export.__main__ import main

    common = ["target", "--model", str(published.target), "--out", str(tmp_path / "out"), "--draft",
              str(published.draft)]
    with pytest.raises(SystemExit):  # argparse: not a choice
        main(common + ["--downsample-mode", "64x"])
    assert "invalid choice: '64x'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # checked while parsing, before anything is read
        main(common + ["--max-slice-nums", "0"])
    assert exit_info.value.code == 2
    assert "--max-slice-nums: 0 is out of range: it must be at least 1" in capsys.readouterr().err
    assert main(common + ["--backend", "optimum", "--downsample-mode", "4x"]) == 2
    assert "need --backend suite" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("mode, page", [("16x", 0), ("16x", 3), ("16x", 8), ("4x", 3)])
def test_command_line_at_f32_reads_the_published_pair_as_target_only(request, tmp_path, capsys, mode, page):
    from utils.ocr import main

    target, draft_folder = _exported(request, mode)
    image = tmp_path / "page.png"
    PAGES[page].image.save(image)
    common = [str(image), "--target", str(target), "--max-new-tokens", "48", "--json", "--device", "CPU",
              "--precision", "f32"]
    printed = []
    for draft in (str(draft_folder), "none"):
        assert main(common + ["--draft", draft]) == 0
        printed.append(json.loads(capsys.readouterr().out))
    speculative, alone = printed
    assert speculative["tokens"] == alone["tokens"] and speculative["text"] == alone["text"]


@pytest.mark.parametrize("mode, page", [("16x", 3), ("16x", 5), ("4x", 5)])
def test_the_pipeline_reads_the_published_pair_as_transformers_does(published, request, mode, page):
    """Same prompt ids (non-thinking mode, adaptive upsizing, 16x or 4x merging, image ids), same prompt embeddings,
    same greedy tokens up to the stop set (transformers' `generate` does not stop at `<|im_end|>`: the published
    generation config names no eos, which is why the suite adds the end of turn to the stop set).

    transformers reads the exported folder's processor files (where the export recorded the mode and the slices)
    and runs the checkpoint in that mode. The tiny target was trained in 4x mode without a think block, so in 16x it
    may answer with a few tokens: what this checks is the reading of the files, not the answer.
    """
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    published_ir = _exported(request, mode)
    processor = AutoProcessor.from_pretrained(published_ir[0])
    model = AutoModelForImageTextToText.from_pretrained(published.target, dtype=torch.float32,
                                                        downsample_mode=mode).eval()
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Text Recognition:"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    inputs = processor(images=[PAGES[page].image], text=[text], return_tensors="pt")
    pipeline = SpeculativeOcrPipeline(published_ir[0], published_ir[1], device="CPU", precision="f32")
    ours = pipeline.build_prompt([pipeline.preprocess(PAGES[page].image).placeholder], prompt="Text Recognition:")
    ids = np.asarray(pipeline.tokenizer.encode(ours, add_special_tokens=False).input_ids.data)[0]
    assert ids.tolist() == inputs["input_ids"][0].tolist()
    with torch.no_grad():
        features = torch.cat(model.model.get_image_features(inputs["pixel_values"], inputs["target_sizes"]).pooler_output)
    embeds = model.get_input_embeddings()(inputs["input_ids"])[0].detach().numpy()
    embeds[ids == pipeline.image_token_id] = features.numpy()
    # pixels may differ by one uint8 level on ~1% of values (PIL vs torchvision bicubic: tests/test_preprocessing.py);
    # the shipped reader's trained vision tower turns that into feature differences of up to 0.047 on these pages
    # (integer resampling, the same on every CPU; 0.019 before its refining on look-alike glyphs made it more
    # sensitive to single strokes): bound 0.07, half as much again for f32 kernels that sum in another order. Text
    # embeddings are looked up exactly, and the tokens below must be equal whatever the features' difference.
    np.testing.assert_allclose(pipeline.prompt_embeddings(PAGES[page].image), embeds, atol=0.07, rtol=0)
    budget = 24
    expected = model.generate(**inputs, max_new_tokens=budget, do_sample=False)[0, ids.size:].tolist()
    result = pipeline.generate(PAGES[page].image, max_new_tokens=budget)
    assert result.tokens == expected  # every token, the EOS or the budget's end included


def test_chat_template_arguments_pass_through_the_command_line(published_ir, tmp_path, capsys, monkeypatch):
    import utils.pipeline.speculative_ocr as speculative_ocr
    from utils.ocr import main

    built = []

    class Recorded(speculative_ocr.SpeculativeOcrPipeline):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(speculative_ocr, "SpeculativeOcrPipeline", Recorded)
    image = tmp_path / "page.png"
    PAGES[0].image.save(image)
    common = [str(image), "--target", str(published_ir[0]), "--draft", "none", "--max-new-tokens", "2", "--json",
              "--device", "CPU"]
    assert main(common + ["--chat-template-kwargs", '{"enable_thinking": true}']) == 0
    assert main(common) == 0
    thinking, plain = (pipeline.build_prompt([]) for pipeline in built)
    assert thinking.endswith("assistant\n<think>\n") and plain.endswith("assistant\n<think>\n\n</think>\n\n")
    with pytest.raises(SystemExit):  # argparse: not a JSON object
        main(common + ["--chat-template-kwargs", "[1]"])
    assert "must be a JSON object" in capsys.readouterr().err


def test_the_notebooks_helpers_run_on_the_published_pair(published, published_ir, tmp_path):
    from utils.evaluation.benchmark import BenchConfig, run_benchmark
    from utils.evaluation.compression_report import compression_report
    from utils.export.compression import compress_folder

    target, draft = published_ir
    int8 = {"target": compress_folder(target, tmp_path / "target-int8", weight_format="int8"),
            "draft": compress_folder(draft, tmp_path / "draft-int8", weight_format="int8")}
    report = compression_report({"fp32": target, "int8": int8["target"]}, {"fp32": draft, "int8": int8["draft"]},
                                PAGES[:1], max_new_tokens=16)
    assert sum(row["int8"] for row in report.sizes) < sum(row["fp32"] for row in report.sizes)
    results = run_benchmark(target, [BenchConfig(None), BenchConfig(draft)], PAGES[:2], max_new_tokens=24,
                            device="CPU", precision="f32", progress=False)
    assert results["output_mismatches"] == []


def _set(path: list, value):
    """A mutation of a parsed JSON file: sets the field at `path` (keys and list indices) to `value`."""
    def mutate(data):
        for key in path[:-1]:
            data = data[key]
        data[path[-1]] = value
    return mutate


def _preprocessor(pair, out):
    from utils.pipeline.preprocessing import ImagePreprocessor

    return ImagePreprocessor.from_pretrained(pair.target)


def _draft(pair, out):
    from utils.checkpoint.draft import load_draft_checkpoint

    return load_draft_checkpoint(pair.draft)


def _export_target(pair, out):
    from utils.export.target import export_target

    return export_target(pair.target, out, draft=pair.draft)


def _prompt(pair, out):
    from utils.pipeline.preprocessing import ChatPromptBuilder

    return ChatPromptBuilder.from_pretrained(pair.target)


UNSUPPORTED = [  # (file, mutation, the loader that must refuse it, what the one line must name)
    ("target/processor_config.json", _set(["image_processor", "downsample_mode"], "64x"), _preprocessor,
     ["processor_config.json", "downsample_mode", "'64x'", "'4x'", "'16x'"]),
    ("target/processor_config.json", _set(["image_processor", "small_image_upsize"], "sometimes"), _preprocessor,
     ["processor_config.json", "small_image_upsize", "'sometimes'", "adaptive"]),
    ("target/config.json", _set(["text_config", "layer_types", 0], "mamba"), _export_target,
     ["config.json", "text_config.layer_types", "'mamba'", "linear_attention"]),
    ("target/config.json", _set(["text_config", "rope_parameters", "rope_type"], "dynamic"), _export_target,
     ["config.json", "rope_type='dynamic'", "default"]),
    ("target/config.json", _set(["model_type"], "qwen3_5"), _export_target, ["config.json", "model_type='qwen3_5'",
                                                                            "'minicpm_ocr'"]),
    ("target/tokenizer_config.json", _set(["extra_special_tokens", "image_token"], None), _prompt,
     ["tokenizer_config.json", "'image_token'", "missing"]),
    ("draft/config.json", _set(["dflash_config", "markov_head_type"], "gated"), _draft,
     ["config.json", "markov_head_type='gated'", "'vanilla'"]),
    ("draft/config.json", _set(["block_size"], 0), _draft, ["config.json", "block_size=0", ">= 1"]),
    ("draft/local-to-target.json", lambda data: None, _draft, []),  # replaced below by an unknown JSON shape
]


@pytest.mark.parametrize("relative, mutate, load, named", UNSUPPORTED,
                         ids=[f"{case[0]}-{index}" for index, case in enumerate(UNSUPPORTED)])
def test_a_value_the_code_cannot_handle_fails_at_load_in_one_line(published, tmp_path, relative, mutate, load, named):
    from utils.tiny import TinyPair

    pair = TinyPair(tmp_path / "pair", published.config)
    shutil.copytree(published.root, pair.root)
    path = pair.root / relative
    if path.name == "local-to-target.json":
        path.write_text(json.dumps({"vocabulary": {"draft": [1, 2]}}))
        named = ["local-to-target.json", "expected a list of target ids"]
    else:
        data = json.loads(path.read_text())
        mutate(data)
        path.write_text(json.dumps(data))
    out = tmp_path / "export"
    with pytest.raises(ValueError) as raised:
        load(pair, out)
    message = str(raised.value)
    assert "\n" not in message, message
    for fragment in named:
        assert fragment in message, (fragment, message)
    assert not out.exists()  # nothing half-written


# How each project states a DSpark draft's drafts per step in config.json (`utils.checkpoint.config`), on the published
# draft (8 drafts per step): (name, edit of config.json, drafts read, words of the one line it gets, or None).
CONVENTIONS = [
    ("DeepSpec: top-level block_size", lambda c: c, 8, None),
    ("DFlash: only a nested verification width", lambda c: _nest_block(c, 9), 8, "read as the anchor and the drafts"),
    ("speculators: nested drafts with sample_from_anchor", lambda c: _nest_block(c, 8) | {"sample_from_anchor": True},
     8, None),
    ("vLLM: num_speculative_tokens beside a block_size that differs",
     lambda c: c | {"num_speculative_tokens": 6}, 6, "block_size=8 disagrees with num_speculative_tokens=6"),
    ("flat and nested target layers that differ",
     lambda c: c | {"dflash_config": c["dflash_config"] | {"target_layer_ids": [1, 3, 4]}}, 8,
     "vLLM would use dflash_config's"),
]


def _nest_block(config: dict, width: int) -> dict:
    flat = {key: value for key, value in config.items() if key != "block_size"}
    return flat | {"dflash_config": config["dflash_config"] | {"block_size": width}}


@pytest.mark.parametrize("name, edit, drafts, line", CONVENTIONS, ids=[c[0] for c in CONVENTIONS])
def test_each_convention_gives_the_drafts_per_step_it_states(published, tmp_path, capsys, name, edit, drafts, line):
    """Exported from the command line: the count read, one line where the file leaves a choice or contradicts
    itself, and an exported config.json that states the count once, at the top level."""
    from utils.checkpoint.config import DSparkConfig, drafts_per_step_fields
    from utils.export.__main__ import main

    draft = shutil.copytree(published.draft, tmp_path / "draft")
    (draft / "config.json").write_text(json.dumps(edit(json.loads((draft / "config.json").read_text()))))
    assert main(["draft", "--model", str(draft), "--out", str(tmp_path / "ir")]) == 0
    notes = [text for text in capsys.readouterr().err.splitlines() if "note:" in text]
    assert (notes == []) if line is None else (len(notes) == 1 and line in notes[0])
    exported = json.loads((tmp_path / "ir" / "config.json").read_text())
    assert drafts_per_step_fields(exported) == [("block_size", drafts)]
    assert "block_size" not in exported["dflash_config"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the exported folder states each field once, or twice alike
        assert DSparkConfig.from_folder(tmp_path / "ir").block_size == drafts


def test_the_anchor_as_a_bonus_token_is_refused_with_the_field_named(published, tmp_path, capsys):
    from utils.export.__main__ import main

    draft = shutil.copytree(published.draft, tmp_path / "draft")
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps(config | {"sample_from_anchor": False}))
    assert main(["draft", "--model", str(draft), "--out", str(tmp_path / "ir")]) == 2
    assert "sample_from_anchor=false" in capsys.readouterr().err
    assert not (tmp_path / "ir").exists()


@pytest.mark.parametrize("width, stated, drafts", [(16, {}, 15), (15, {}, 15), (None, {"block_size": 15}, 15)])
def test_the_published_drafts_model_card_decides_an_ambiguous_block(published, width, stated, drafts):
    """openbmb/MiniCPM-OCR-1.0-DSpark's card states 15 drafts per forward pass: a nested block of 16 (DFlash's
    width) or of 15 (speculators' count) alone both read as 15, each with its reason."""
    from utils.checkpoint.config import PUBLISHED_DRAFTS_PER_STEP, DSparkConfig

    repository = "openbmb/MiniCPM-OCR-1.0-DSpark"
    assert PUBLISHED_DRAFTS_PER_STEP[repository] == 15
    config = _nest_block(json.loads((published.draft / "config.json").read_text()), width) if width else \
        json.loads((published.draft / "config.json").read_text()) | stated
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert DSparkConfig.from_dict(config, repository=repository).block_size == drafts
    reasons = [str(warning.message) for warning in caught if "drafts per step" in str(warning.message)]
    assert len(reasons) == (1 if width else 0)
    assert not width or f"to match the model card of {repository} (15)" in reasons[0]


def test_a_published_draft_read_to_another_count_than_its_card_is_refused_unless_told(published, tmp_path):
    from utils.checkpoint.config import DraftValidationError, DSparkConfig

    draft = shutil.copytree(published.draft, tmp_path / "MiniCPM-OCR-1.0-DSpark")  # the folder utils.models fills
    with pytest.raises(DraftValidationError, match="block_size=8 drafts per step, but the model card of "
                                                   "openbmb/MiniCPM-OCR-1.0-DSpark states 15"):
        DSparkConfig.from_folder(draft)
    assert DSparkConfig.from_folder(draft, drafts_per_step=8).block_size == 8
