"""Pretraining the tiny target: it learns to write corpus text, deterministically, and keeps its layout."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from utils.pages.samples import printed_sample_pages
from utils.files import sha256_file
from utils.tiny import BUILD_STAMP, PretrainConfig, TinyPairConfig, build_tiny_pair
from utils.tiny.__main__ import main as tiny_cli
from utils.tiny.pretrain import answer_loss, ocr_example

QUICK = PretrainConfig()  # the shipped pair's recipe
TINY = PretrainConfig(steps=2, examples_per_step=1)  # enough to exercise every file the pretraining writes
HELD_OUT = [(page.text, page.image) for page in printed_sample_pages()]


def _without_dtype(path) -> dict:
    """The config without the `dtype` field that transformers adds when it saves a loaded model."""
    config = json.loads(path.read_text())
    for part in (config, config["text_config"], config["vision_config"]):
        part.pop("dtype", None)
    return config


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return build_tiny_pair(tmp_path_factory.mktemp("pretrained") / "pair", TinyPairConfig(), pretrain=QUICK)


def test_ocr_example_puts_the_loss_on_the_answer_and_eos_only(tiny_pair):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_pair.target)
    text, image = HELD_OUT[0]
    example = ocr_example(processor, image, "Text Recognition:", text)
    answer = processor.tokenizer(text, add_special_tokens=False).input_ids + [processor.tokenizer.eos_token_id]
    labelled = example["labels"][0][example["labels"][0] != -100].tolist()
    assert labelled == answer == example["input_ids"][0, -len(answer):].tolist()
    assert example["input_ids"].shape == example["attention_mask"].shape == example["labels"].shape


@pytest.mark.slow
def test_pretraining_lowers_the_loss_on_held_out_pages(pretrained, tiny_pair):
    """Measured: 7.27 nats per answer token for the random target, 6.89 after this pretraining."""
    assert answer_loss(pretrained.target, HELD_OUT) < answer_loss(tiny_pair.target, HELD_OUT) - 0.2


@pytest.mark.slow
def test_pretrained_target_keeps_its_files_and_never_writes_padding_ids(pretrained, tiny_pair):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    for name in ("generation_config.json", "tokenizer.json", "processor_config.json"):
        assert (pretrained.target / name).read_text() == (tiny_pair.target / name).read_text(), name
    assert _without_dtype(pretrained.target / "config.json") == _without_dtype(tiny_pair.target / "config.json")
    processor = AutoProcessor.from_pretrained(pretrained.target)
    size = len(processor.tokenizer)
    weights = load_file(str(pretrained.target / "model.safetensors"))
    embedding = next(tensor for name, tensor in weights.items() if name.endswith("embed_tokens.weight"))
    assert (embedding[size:] == 0).all()
    target = AutoModelForImageTextToText.from_pretrained(pretrained.target).eval()
    from utils.tiny.distill_data import prompt_inputs

    endings = []
    for _, image in HELD_OUT[:4]:
        inputs = prompt_inputs(processor, image, "Text Recognition:")
        with torch.no_grad():
            answer = target.generate(**inputs, max_new_tokens=64, do_sample=False)[0, inputs["input_ids"].shape[1]:]
        assert int(answer.max()) < size
        endings.append(int(answer[-1]) == processor.tokenizer.eos_token_id)
    assert any(endings), "the pretrained target ends its answers (which ones depends on the machine's rounding)"


def test_pretraining_is_deterministic_and_recorded(tmp_path, capsys):
    argv = ["--out", str(tmp_path / "cli"), "--pretrain", "--pretrain-steps", "2"]
    assert tiny_cli(argv) == 0
    assert "(pretrained target)" in capsys.readouterr().out
    config = PretrainConfig(steps=2)
    again = build_tiny_pair(tmp_path / "python", TinyPairConfig(), pretrain=config)
    assert sha256_file(tmp_path / "cli" / "target" / "model.safetensors") == sha256_file(again.target / "model.safetensors")
    assert json.loads((again.root / BUILD_STAMP).read_text())["pretrain"] == config.options()
    other = build_tiny_pair(tmp_path / "tiny", TinyPairConfig(), pretrain=TINY)
    assert sha256_file(other.target / "model.safetensors") != sha256_file(again.target / "model.safetensors")
    with pytest.raises(FileExistsError, match="other options"):
        build_tiny_pair(again.root, TinyPairConfig())


@pytest.mark.parametrize("options, message", [
    ({"steps": 0}, "steps=0"), ({"examples_per_step": 0}, "examples_per_step=0"), ({"max_lines": 0}, "max_lines=0"),
    ({"prompts": ()}, "prompts"), ({"learning_rate": 0.0}, "learning_rate=0.0"),
])
def test_invalid_pretrain_options_are_rejected(options, message):
    with pytest.raises(ValueError, match=message):
        PretrainConfig(**options)
