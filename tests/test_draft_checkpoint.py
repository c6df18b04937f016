"""Loading and validating DSpark draft folders: every broken copy of the tiny draft gets a clear error."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from utils.checkpoint.config import DraftValidationError, DSparkConfig
from utils.checkpoint.draft import (DRAFT_WEIGHTS, LOCAL_TO_TARGET, TargetSpec, check_draft_fits_target,
                                    load_draft_checkpoint)


@pytest.fixture
def draft_copy(tiny_pair, tmp_path):
    """A writable copy of the tiny draft folder."""
    return shutil.copytree(tiny_pair.draft, tmp_path / "draft")


def _edit_config(folder, edit):
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))


def _edit_tensors(folder, edit):
    tensors = load_file(str(folder / DRAFT_WEIGHTS))
    edit(tensors)
    save_file(tensors, str(folder / DRAFT_WEIGHTS))


def test_tiny_draft_loads_and_maps_d2t_to_absolute_ids(tiny_pair):
    checkpoint = load_draft_checkpoint(tiny_pair.draft)
    assert checkpoint.config.is_pruned
    assert checkpoint.target_ids.tolist() == json.loads((tiny_pair.draft / LOCAL_TO_TARGET).read_text())
    assert checkpoint.config.markov_top_k == min(64, checkpoint.config.draft_vocab_size)
    check_draft_fits_target(checkpoint, TargetSpec.from_folder(tiny_pair.target))


def test_flat_and_nested_configs_read_the_same(tiny_pair):
    nested = json.loads((tiny_pair.draft / "config.json").read_text())
    flat = {key: value for key, value in nested.items() if key != "dflash_config"} | nested["dflash_config"]
    assert DSparkConfig.from_dict(flat) == DSparkConfig.from_dict(nested)


def test_a_field_in_both_places_takes_the_trainers_meaning(tiny_pair):
    """DeepSpec's top-level `block_size` counts the drafts of a step (the block's positions, anchor included);
    DFlash's `dflash_config.block_size` the verification width, one more. Top level wins; nested alone is read as
    DFlash's, with a line saying so; another field given twice with two values is named with vLLM's choice."""
    config = json.loads((tiny_pair.draft / "config.json").read_text())
    config["block_size"], config["dflash_config"]["block_size"] = 15, 16  # the card's 15 drafts, 16 verified
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the two agree: no warning
        assert DSparkConfig.from_dict(config).block_size == 15
    config["dflash_config"]["block_size"] = 8
    with pytest.warns(UserWarning, match=r"dflash_config.block_size=8 disagrees with block_size=15: using 15"):
        assert DSparkConfig.from_dict(config).block_size == 15
    del config["block_size"]
    with pytest.warns(UserWarning, match=r"only dflash_config.block_size=8 states the block: read as the anchor and "
                                         r"the drafts, 7 drafts per step, as z-lab's DFlash reads that field"):
        assert DSparkConfig.from_dict(config).block_size == 7
    assert DSparkConfig.from_dict(config, drafts_per_step=8).block_size == 8
    config["block_size"], config["dflash_config"]["block_size"] = 15, 16
    config["mask_token_id"], config["dflash_config"]["mask_token_id"] = 5, 6
    with pytest.warns(UserWarning, match=r"mask_token_id is 5 at the top level and 6 under dflash_config: using the "
                                         r"top level's.*vLLM would use dflash_config's"):
        assert DSparkConfig.from_dict(config).mask_token_id == 5


@pytest.mark.parametrize("rope, named", [
    ({"partial_rotary_factor": 0.25}, "partial_rotary_factor=0.25"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}},
     "partial_rotary_factor=0.25"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e7}}, "rope_type='yarn'"),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_type='linear'"),
])
def test_rotary_settings_the_draft_does_not_apply_give_one_warning(tiny_pair, rope, named):
    """The draft follows its trainer (every dimension rotated with rope_theta) and says what it leaves out."""
    config = json.loads((tiny_pair.draft / "config.json").read_text()) | rope
    with pytest.warns(UserWarning) as caught:
        loaded = DSparkConfig.from_dict(config)
    messages = [str(warning.message) for warning in caught]
    assert len(messages) == 1 and named in messages[0] and "rotates every dimension" in messages[0], messages
    assert loaded.head_dim == config["head_dim"]


def test_plain_rotary_settings_give_no_warning(tiny_pair):
    config = json.loads((tiny_pair.draft / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 1.0,
                                 "mrope_section": [2, 1, 1]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DSparkConfig.from_dict(config)


def test_bf16_checkpoints_are_read(draft_copy):
    import torch
    from safetensors.torch import load_file as load_torch
    from safetensors.torch import save_file as save_torch

    tensors = load_torch(str(draft_copy / DRAFT_WEIGHTS))
    halved = {name: (t if name == "d2t" else t.to(torch.bfloat16)) for name, t in tensors.items()}
    save_torch(halved, str(draft_copy / DRAFT_WEIGHTS))
    checkpoint = load_draft_checkpoint(draft_copy)
    expected = halved["lm_head.weight"].float().numpy()
    assert np.array_equal(checkpoint.tensors["lm_head.weight"], expected)


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.update(draft_vocab_size=5000), r"config.json: draft_vocab_size=5000 must be in \[1, vocab_size=1000\]"),
    (lambda c: c.update(draft_vocab_size=0), r"draft_vocab_size=0 must be in \[1"),
    (lambda c: c.update(architectures=["LlamaForCausalLM"]), "not a DSpark draft"),
    (lambda c: c.pop("block_size"), "field 'block_size' is missing"),
    (lambda c: c["dflash_config"].update(markov_head_type="gated"), "markov_head_type='gated' is not supported"),
    (lambda c: c["dflash_config"].update(mask_token_id=4000), "mask_token_id=4000 is outside"),
    (lambda c: c.update(intermediate_size=100), "tensor 'layers.0.mlp.gate_proj.weight' has shape"),
])
def test_broken_config_is_rejected_naming_the_field(draft_copy, edit, message):
    _edit_config(draft_copy, edit)
    with pytest.raises(DraftValidationError, match=message):
        load_draft_checkpoint(draft_copy)


@pytest.mark.parametrize("tensor", ["lm_head.weight", "d2t"])
def test_pruned_draft_without_lm_head_or_d2t_is_an_error(draft_copy, tensor):
    _edit_tensors(draft_copy, lambda tensors: tensors.pop(tensor))
    with pytest.raises(DraftValidationError, match=f"tensor '{tensor}' is missing.*pruned vocabulary"):
        load_draft_checkpoint(draft_copy)


def test_d2t_that_disagrees_with_local_to_target_is_an_error(draft_copy):
    listed = json.loads((draft_copy / LOCAL_TO_TARGET).read_text())
    listed[7], listed[8] = listed[8], listed[7]
    (draft_copy / LOCAL_TO_TARGET).write_text(json.dumps(listed))
    with pytest.raises(DraftValidationError, match="disagrees with local-to-target.json at draft token 7"):
        load_draft_checkpoint(draft_copy)


def test_absolute_d2t_is_caught_by_local_to_target(draft_copy):
    absolute = json.loads((draft_copy / LOCAL_TO_TARGET).read_text())
    _edit_tensors(draft_copy, lambda tensors: tensors.update(d2t=np.asarray(absolute, dtype=np.int64)))
    with pytest.raises(DraftValidationError, match="d2t"):
        load_draft_checkpoint(draft_copy)


def test_d2t_outside_the_vocabulary_is_an_error(draft_copy):
    def push_out(tensors):
        tensors["d2t"][3] = 10_000

    _edit_tensors(draft_copy, push_out)
    with pytest.raises(DraftValidationError, match=r"d2t\[3\] maps draft token 3 to target id .* outside"):
        load_draft_checkpoint(draft_copy)


def test_d2t_that_repeats_a_target_id_is_an_error(draft_copy):
    def repeat(tensors):
        tensors["d2t"][1] = tensors["d2t"][0] - 1  # draft token 1 -> the same target id as draft token 0

    _edit_tensors(draft_copy, repeat)
    with pytest.raises(DraftValidationError, match="maps several draft tokens to target id"):
        load_draft_checkpoint(draft_copy)


def test_wrong_tensor_shape_is_an_error(draft_copy):
    _edit_tensors(draft_copy, lambda t: t.update({"fc.weight": np.zeros((64, 10), dtype=np.float32)}))
    with pytest.raises(DraftValidationError, match=r"tensor 'fc.weight' has shape \(64, 10\)"):
        load_draft_checkpoint(draft_copy)


def test_unknown_tensor_is_an_error(draft_copy):
    _edit_tensors(draft_copy, lambda t: t.update({"layers.9.mlp.up_proj.weight": np.zeros(3, dtype=np.float32)}))
    with pytest.raises(DraftValidationError, match="unexpected tensors"):
        load_draft_checkpoint(draft_copy)


def test_pickle_checkpoints_are_not_loaded(draft_copy):
    (draft_copy / DRAFT_WEIGHTS).rename(draft_copy / "pytorch_model.bin")
    with pytest.raises(DraftValidationError, match="must be safetensors.*pytorch_model.bin"):
        load_draft_checkpoint(draft_copy)


def test_missing_local_to_target_is_an_error_for_a_pruned_draft(draft_copy):
    (draft_copy / LOCAL_TO_TARGET).unlink()
    with pytest.raises(DraftValidationError, match="local-to-target.json: not found"):
        load_draft_checkpoint(draft_copy)


@pytest.mark.parametrize("target, message", [
    (TargetSpec(hidden_size=128, vocab_size=1024, num_hidden_layers=8), "hidden_size=64 but the target's is 128"),
    (TargetSpec(hidden_size=64, vocab_size=512, num_hidden_layers=8), "vocab_size=1000 exceeds the target's 512"),
    (TargetSpec(hidden_size=64, vocab_size=1024, num_hidden_layers=4), "target layer id 3 is out of range"),
])
def test_draft_for_another_target_is_rejected(tiny_pair, target, message):
    checkpoint = load_draft_checkpoint(tiny_pair.draft)
    with pytest.raises(DraftValidationError, match=message):
        check_draft_fits_target(checkpoint, target)


def test_fields_a_published_config_leaves_out_are_read_from_the_tensors(tiny_pair, draft_copy):
    def drop_inferable(config):
        for part in (config, config["dflash_config"]):
            for name in ("head_dim", "enable_confidence_head", "confidence_head_with_markov"):
                part.pop(name, None)

    _edit_config(draft_copy, drop_inferable)
    loaded, original = load_draft_checkpoint(draft_copy), load_draft_checkpoint(tiny_pair.draft)
    assert loaded.config.defaulted == {"head_dim", "enable_confidence_head", "confidence_head_with_markov"}
    assert loaded.config == original.config  # head_dim and both flags recovered
    assert loaded.config.enable_confidence_head and loaded.config.confidence_head_with_markov


def test_head_dim_comes_from_the_q_norm_weight_when_config_json_omits_it(tiny_pair):
    from utils.checkpoint.draft import _complete_from_tensors

    raw = json.loads((tiny_pair.draft / "config.json").read_text())
    raw.pop("head_dim")
    config = DSparkConfig.from_dict(raw)
    assert config.head_dim == config.hidden_size // config.num_attention_heads  # the guess config.json alone allows
    wider = _complete_from_tensors(config, {"layers.0.self_attn.q_norm.weight": np.ones(2 * config.head_dim)})
    assert wider.head_dim == 2 * config.head_dim  # as the real draft: 256, not hidden / heads = 128


def test_tensors_real_loaders_skip_are_skipped(tiny_pair, draft_copy):
    def add_extras(tensors):
        tensors["t2d"] = np.zeros(8, dtype=np.bool_)
        tensors["mask_embedding"] = np.zeros((1, 64), dtype=np.float32)

    _edit_tensors(draft_copy, add_extras)
    checkpoint = load_draft_checkpoint(draft_copy)
    assert not {"t2d", "mask_embedding"} & set(checkpoint.tensors)
    assert checkpoint.target_ids.tolist() == load_draft_checkpoint(tiny_pair.draft).target_ids.tolist()


@pytest.mark.parametrize("shape", ["object with a list", "object of indices"])
def test_local_to_target_may_come_in_other_json_shapes(tiny_pair, draft_copy, shape):
    ids = json.loads((draft_copy / LOCAL_TO_TARGET).read_text())
    other = {"local_to_target": ids} if shape == "object with a list" else {str(i): v for i, v in enumerate(ids)}
    (draft_copy / LOCAL_TO_TARGET).write_text(json.dumps(other))
    assert load_draft_checkpoint(draft_copy).target_ids.tolist() == ids


@pytest.mark.parametrize("content, message", [
    ('"not ids"', "expected a list of target ids"), ('{"0": 5, "2": 7}', "not the draft ids"),
    ("[1, 2", "not valid JSON"),
])
def test_local_to_target_in_an_unknown_shape_is_named(draft_copy, content, message):
    (draft_copy / LOCAL_TO_TARGET).write_text(content)
    with pytest.raises(DraftValidationError, match=message):
        load_draft_checkpoint(draft_copy)
