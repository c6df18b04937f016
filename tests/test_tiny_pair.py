"""The tiny pair builder: loads with transformers, is deterministic, and has the published draft layout."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from utils.checkpoint.draft import DRAFT_WEIGHTS, EXPORT_AUDIT, LAYER_TENSORS, LOCAL_TO_TARGET
from utils.files import sha256_file
from utils.tiny import TinyPairConfig, build_tiny_pair
from utils.tiny.config import READING_PAIR
from utils.tiny.__main__ import main as tiny_cli
from utils.tiny.tokenizer import MULTIMODAL_TOKENS

PAIR_TOP_LEVEL_TENSORS = {
    "fc.weight", "hidden_norm.weight", "norm.weight", "lm_head.weight", "markov_head.markov_w1.weight",
    "markov_head.markov_w2.weight", "confidence_head.proj.weight", "confidence_head.proj.bias", "d2t",
}


def _hashes(root):
    return {str(path.relative_to(root)): sha256_file(path) for path in sorted(root.rglob("*")) if path.is_file()}


def _draft(pair):
    config = json.loads((pair.draft / "config.json").read_text())
    tensors = load_file(str(pair.draft / DRAFT_WEIGHTS))
    local_to_target = json.loads((pair.draft / LOCAL_TO_TARGET).read_text())
    return config, tensors, local_to_target


def test_target_loads_with_transformers_and_generates(tiny_pair):
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(tiny_pair.target).eval()
    processor = AutoProcessor.from_pretrained(tiny_pair.target)
    assert type(model).__name__ == "MiniCPMOcrForConditionalGeneration"
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Text Recognition:"}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    image = Image.new("RGB", (180, 90), "white")
    inputs = processor(images=[image], text=[prompt], return_tensors="pt")
    assert (inputs["input_ids"] == model.config.image_token_id).sum() > 0
    output = model.generate(**inputs, max_new_tokens=5, do_sample=False)
    assert output.shape[1] > inputs["input_ids"].shape[1]


def test_target_text_layers_are_hybrid_like_the_real_model(tiny_pair):
    config = json.loads((tiny_pair.target / "config.json").read_text())
    text = config["text_config"]
    assert config["model_type"] == "minicpm_ocr" and text["model_type"] == "qwen3_5_text"
    assert set(text["layer_types"]) == {"linear_attention", "full_attention"}
    assert text["layer_types"][3] == "full_attention"
    assert text["vocab_size"] >= json.loads((tiny_pair.draft / "config.json").read_text())["vocab_size"]


def test_tokenizer_is_trained_bpe_with_processor_special_tokens(tiny_pair):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_pair.target)
    assert len(tokenizer) == tiny_pair.config.tokenizer_vocab_size
    tokenizer_json = json.loads((tiny_pair.target / "tokenizer.json").read_text())
    assert tokenizer_json["model"]["type"] == "BPE" and len(tokenizer_json["model"]["merges"]) > 100
    for attribute, token in MULTIMODAL_TOKENS.items():
        assert getattr(tokenizer, attribute) == token
        assert tokenizer.convert_tokens_to_ids(token) != tokenizer.unk_token_id
    text = "Total due 616.32"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    assert tokenizer.eos_token == "<|im_end|>"


def test_a_byte_vocabulary_gives_one_token_per_character():
    """The reading sizes' tokenizer learns no merge: character k of an answer is token k, as the reader needs."""
    from utils.tiny.tokenizer import BYTE_VOCABULARY, train_tokenizer

    tokenizer = train_tokenizer(READING_PAIR["tokenizer_vocab_size"])
    assert len(tokenizer) == BYTE_VOCABULARY
    assert not json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    text = "| Total due | 616.32 |\n"
    assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) == len(text)


def test_build_is_deterministic(tiny_pair, tmp_path):
    again = build_tiny_pair(tmp_path / "again", TinyPairConfig())
    assert _hashes(again.root) == _hashes(tiny_pair.root)


def test_another_seed_gives_other_weights(tiny_pair, tmp_path):
    other = build_tiny_pair(tmp_path / "other", TinyPairConfig(seed=1))
    assert sha256_file(other.draft / DRAFT_WEIGHTS) != sha256_file(tiny_pair.draft / DRAFT_WEIGHTS)
    assert sha256_file(other.target / "model.safetensors") != sha256_file(tiny_pair.target / "model.safetensors")


def test_draft_has_the_published_tensor_layout(tiny_pair):
    config, tensors, _ = _draft(tiny_pair)
    layers = config["num_hidden_layers"]
    expected = {f"layers.{i}.{name}" for i in range(layers) for name in LAYER_TENSORS} | PAIR_TOP_LEVEL_TENSORS
    assert set(tensors) == expected
    assert len(tensors) == 11 * layers + 9  # the real draft: 5 layers -> 64 tensors
    assert not any("embed" in name for name in tensors)
    hidden, rank = config["hidden_size"], config["dflash_config"]["markov_rank"]
    draft_vocab, input_vocab = config["draft_vocab_size"], config["vocab_size"]
    assert tensors["lm_head.weight"].shape == (draft_vocab, hidden)
    assert tensors["markov_head.markov_w1.weight"].shape == (input_vocab, rank)
    assert tensors["markov_head.markov_w2.weight"].shape == (draft_vocab, rank)
    assert tensors["confidence_head.proj.weight"].shape == (1, hidden + rank)
    assert tensors["fc.weight"].shape == (hidden, len(config["dflash_config"]["target_layer_ids"]) * hidden)
    assert tensors["d2t"].dtype == np.int64 and tensors["d2t"].shape == (draft_vocab,)


def test_draft_config_is_laid_out_like_the_published_one(tiny_pair):
    config, _, _ = _draft(tiny_pair)
    assert config["architectures"] == ["Qwen3DSparkModel"]
    assert config["draft_vocab_size"] < config["vocab_size"]
    assert config["block_size"] == tiny_pair.config.block_size
    nested = config["dflash_config"]
    assert nested["target_layer_ids"] == list(tiny_pair.config.target_layer_ids)
    assert nested["markov_head_type"] == "vanilla" and nested["markov_rank"] == tiny_pair.config.markov_rank
    assert nested["enable_confidence_head"] is True and nested["confidence_head_with_markov"] is True
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(tiny_pair.target).convert_ids_to_tokens(nested["mask_token_id"]) == "<|mask|>"


def test_d2t_is_delta_encoded_and_matches_local_to_target(tiny_pair):
    config, tensors, local_to_target = _draft(tiny_pair)
    d2t = tensors["d2t"]
    absolute = np.arange(len(d2t)) + d2t
    assert absolute.tolist() == local_to_target
    assert not np.array_equal(d2t, absolute)  # delta-encoded, not absolute
    assert len(set(local_to_target)) == len(local_to_target)
    assert min(local_to_target) >= 0 and max(local_to_target) < config["vocab_size"]
    assert config["eos_token_id"] in local_to_target
    assert local_to_target != sorted(local_to_target)  # random, unsorted subset


def test_export_audit_hashes_match_the_files(tiny_pair):
    audit = json.loads((tiny_pair.draft / EXPORT_AUDIT).read_text())
    assert audit["weights_sha256"] == sha256_file(tiny_pair.draft / DRAFT_WEIGHTS)
    assert audit["local_to_target_sha256"] == sha256_file(tiny_pair.draft / LOCAL_TO_TARGET)
    coverage = audit["vocabulary_coverage"]
    assert coverage["draft_vocab_size"] == tiny_pair.config.draft_vocab_size
    assert coverage["contains_eos"] is True


def test_unusual_pair_has_the_requested_shapes(tmp_path):
    spec = TinyPairConfig(seed=3, draft_vocab_size=37, block_size=5, target_layer_ids=(0, 2, 4, 6), markov_rank=3,
                          vocab_size=1100)
    pair = build_tiny_pair(tmp_path / "unusual", spec)
    config, tensors, local_to_target = _draft(pair)
    assert tensors["lm_head.weight"].shape[0] == 37 and len(local_to_target) == 37
    assert tensors["markov_head.markov_w2.weight"].shape == (37, 3)
    assert tensors["fc.weight"].shape[1] == 4 * config["hidden_size"]
    assert config["block_size"] == 5
    target = json.loads((pair.target / "config.json").read_text())
    assert target["text_config"]["vocab_size"] == 1100


@pytest.mark.parametrize("options, message", [
    ({"draft_vocab_size": 1000}, "draft_vocab_size=1000"),
    ({"draft_vocab_size": 5000}, "draft_vocab_size=5000"),
    ({"draft_vocab_size": 0}, "draft_vocab_size=0"),
    ({"block_size": 1}, "block_size=1"),
    ({"target_layer_ids": (1, 9)}, "target layer id 9"),
    ({"target_layer_ids": (7,)}, "target layer id 7"),
    ({"target_layer_ids": (1, 1)}, "repeats"),
    ({"target_layer_ids": ()}, "must not be empty"),
    ({"markov_rank": 0}, "markov_rank=0"),
    ({"vocab_size": 900}, "vocab_size=900"),
    ({"tokenizer_vocab_size": 269}, "tokenizer_vocab_size=269 must be >= 270"),
    ({"small_image_upsize": "sometimes"}, "small_image_upsize='sometimes'"),
])
def test_invalid_options_are_rejected_with_the_option_named(options, message):
    with pytest.raises(ValueError, match=message):
        TinyPairConfig(**options)


def test_existing_pair_is_reused_and_other_options_refused(tiny_pair):
    assert build_tiny_pair(tiny_pair.root, TinyPairConfig()).seconds == 0.0
    with pytest.raises(FileExistsError, match="other options"):
        build_tiny_pair(tiny_pair.root, TinyPairConfig(seed=5))


def test_failed_build_leaves_no_folder(tmp_path, monkeypatch):
    import utils.tiny.draft

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(utils.tiny.draft, "build_tiny_draft", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        build_tiny_pair(tmp_path / "pair")
    assert list(tmp_path.iterdir()) == []


def test_command_line_builds_and_rejects_bad_options(tmp_path, capsys):
    assert tiny_cli(["--out", str(tmp_path / "cli"), "--draft-vocab-size", "64", "--block-size", "4"]) == 0
    assert "tiny pair built" in capsys.readouterr().out
    assert json.loads((tmp_path / "cli" / "draft" / "config.json").read_text())["draft_vocab_size"] == 64
    assert tiny_cli(["--out", str(tmp_path / "bad"), "--draft-vocab-size", "4000"]) == 2
    assert "draft_vocab_size=4000" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_pair_from_an_older_builder_is_rebuilt(tmp_path):
    pair = build_tiny_pair(tmp_path / "pair")
    stamp = pair.root / "tiny-pair.json"
    old = json.loads(stamp.read_text()) | {"builder_version": 0}
    stamp.write_text(json.dumps(old))
    assert build_tiny_pair(tmp_path / "pair").seconds > 0
    assert json.loads(stamp.read_text())["builder_version"] != 0


@pytest.mark.slow
def test_command_line_manifest_records_hashes_and_the_random_drafts_figures(tmp_path, capsys):
    from utils.tiny import default_pair
    from utils.tiny.manifest import HELD_OUT_WALKS

    assert tiny_cli(["--out", str(tmp_path / "cli"), "--manifest"]) == 0
    assert "manifest.json" in capsys.readouterr().out
    pair = default_pair(tmp_path / "cli")  # verifies every hash
    assert pair.pretrain is None and pair.distill is None and pair.config == TinyPairConfig()
    manifest = json.loads((tmp_path / "cli" / "manifest.json").read_text())
    for walk in HELD_OUT_WALKS:
        figures = manifest["held_out"][walk]
        assert figures["answers"] == 20 and len(figures["answer_lengths"]) == 20
        assert figures["tokens_per_step"] < 1.1, "a random draft is almost never accepted"
