"""The DSpark draft exported to OpenVINO IR against the PyTorch reference, and the export's own guarantees.

Tolerances (fp32 IR compiled with the f32 hint; measured on the tiny drafts: about 1e-6):
    LOGITS_ATOL = 1e-4 on logits and final hidden states, CONFIDENCE_ATOL = 1e-5 on the confidence head;
    walk tokens must be identical. fp16 weights: FP16_ATOL = 5e-3 on logits.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import openvino as ov
import pytest
import torch
from safetensors.numpy import load_file, save_file

from utils.checkpoint.config import DraftValidationError
from utils.checkpoint.draft import DRAFT_WEIGHTS, LOCAL_TO_TARGET
from utils.contract import (DRAFT_MODEL, MARKOV_HEAD_MODEL, RT_INFO_KEYS, RT_INFO_NAMESPACE,
                            draft_cache_layout_is_current, read_d2t, read_draft_info)
from utils.engine.device import F32_PROPERTIES
from utils.engine.draft import ContextCache, DraftModel, MarkovHead
from utils.export import draft as draft_export
from utils.export.__main__ import main as export_cli
from utils.export.draft import export_draft
from utils.reference.markov import dense_walk, propose, top_k_walk
from utils.reference.modeling import DraftContextCache, load_reference_draft
from utils.tiny import TinyPairConfig, build_tiny_pair

LOGITS_ATOL = 1e-4
CONFIDENCE_ATOL = 1e-5
FP16_ATOL = 5e-3
UNUSUAL = TinyPairConfig(draft_vocab_size=37, block_size=5, target_layer_ids=(0, 2, 4, 6), markov_rank=3)
STRONG_MARKOV_SCALE = 100.0  # the random Markov head is too weak to move an argmax; a trained one does


def _copy_draft(source, destination, *, edit_tensors=None, edit_config=None):
    """A copy of a draft folder with its tensors and/or config.json edited in place."""
    shutil.copytree(source, destination)
    if edit_tensors:
        tensors = load_file(str(destination / DRAFT_WEIGHTS))
        edit_tensors(tensors)
        save_file(tensors, str(destination / DRAFT_WEIGHTS))
    if edit_config:
        config = json.loads((destination / "config.json").read_text())
        edit_config(config)
        (destination / "config.json").write_text(json.dumps(config))
    return destination


def _strengthen_markov_head(tensors):
    tensors["markov_head.markov_w2.weight"] = tensors["markov_head.markov_w2.weight"] * STRONG_MARKOV_SCALE


@pytest.fixture(scope="module")
def drafts(tiny_pair, tmp_path_factory):
    """name -> source draft folder: the tiny draft, its copy with a strong Markov head, and an unusual pruned
    draft (Vd=37 < 64, B=5, four target layers, r=3), also with a strong Markov head."""
    root = tmp_path_factory.mktemp("drafts")
    unusual = build_tiny_pair(root / "unusual-pair", UNUSUAL)
    return {"tiny": tiny_pair.draft,
            "strong": _copy_draft(tiny_pair.draft, root / "strong", edit_tensors=_strengthen_markov_head),
            "unusual": _copy_draft(unusual.draft, root / "unusual", edit_tensors=_strengthen_markov_head)}


@pytest.fixture(scope="module")
def exported(drafts, tmp_path_factory):
    """name -> fp32 export of each draft (exported once per module)."""
    root = tmp_path_factory.mktemp("exported")
    return {name: export_draft(source, root / name) for name, source in drafts.items()}


@pytest.fixture(scope="module")
def reference(drafts):
    return {name: load_reference_draft(source) for name, source in drafts.items()}


def _random_inputs(model, *, new_len, seed):
    """([1, B, H] block embeddings, [1, N, L*H] new context), seeded."""
    generator = torch.Generator().manual_seed(seed)
    config = model.config
    block = torch.randn(1, config.block_size, config.hidden_size, generator=generator)
    context = torch.randn(1, new_len, len(config.target_layer_ids) * config.hidden_size, generator=generator)
    return block, context


@pytest.mark.parametrize("growth", [ContextCache.GROWTH, 4], ids=["one-buffer", "growing-buffers"])
@pytest.mark.parametrize("name", ["tiny", "unusual"])
def test_backbone_matches_reference_over_a_growing_context_and_after_a_crop(name, growth, exported, reference,
                                                                             monkeypatch):
    monkeypatch.setattr(ContextCache, "GROWTH", growth)  # 4: the buffers grow, and hold masked positions, often
    model, runtime = reference[name], DraftModel(exported[name], properties=F32_PROPERTIES)
    cache = DraftContextCache(model.config.num_hidden_layers)
    worst = 0.0
    for step, new_len in enumerate((6, 1, 4, 3, "crop", 2, 0)):
        if new_len == "crop":
            cache.crop(8)
            runtime.crop(8)
            continue
        block, context = _random_inputs(model, new_len=new_len, seed=step)
        with torch.no_grad():
            hidden = model.forward_block(block, context, cache)[0]
            logits = model.logits(hidden)
        ov_logits, ov_hidden = runtime.forward_block(block.numpy(), context.numpy())
        assert ov_logits.shape == (model.config.block_size, model.config.draft_vocab_size)
        assert runtime.length == cache.length
        worst = max(worst, np.abs(ov_logits - logits.numpy()).max(), np.abs(ov_hidden - hidden.numpy()).max())
    assert worst <= LOGITS_ATOL, f"max abs diff {worst:.2e}"


def test_context_cache_grows_in_steps_and_keeps_what_it_holds(monkeypatch):
    monkeypatch.setattr(ContextCache, "GROWTH", 4)
    cache = ContextCache(2, kv_heads=1, head_dim=2)
    rows = [np.arange(12, dtype=np.float32).reshape(1, 1, 6, 2) + offset for offset in (0, 100, 200, 300)]
    cache.append([part[:, :, :3] for part in rows])
    cache.append([part[:, :, 3:] for part in rows])
    assert (cache.length, cache.capacity) == (6, 8)
    assert all(buffer.shape == (1, 1, 8, 2) and buffer.flags.c_contiguous for buffer in cache.buffers())
    for view, part in zip(cache.views(), rows):
        np.testing.assert_array_equal(view, part)
    cache.crop(2)
    cache.append([part[:, :, :1] * -1 for part in rows])
    np.testing.assert_array_equal(cache.views()[1][0, 0, :, 0], [100, 102, -100])
    with pytest.raises(ValueError, match="cannot crop"):
        cache.crop(4)


@pytest.mark.parametrize("name", ["tiny", "unusual"])
def test_the_backbone_reads_the_context_cache_in_place(name, exported):
    """Each cached K/V input feeds matmuls only (and ShapeOf, which reads its shape): no transpose, concat, repeat
    or convert moves the cache per call (up to draft IR format 1 each call transposed, concatenated and repeated
    all of it). The keys are the scores' second operand, taken as rows (`transpose_b`)."""
    model = ov.Core().read_model(exported[name] / DRAFT_MODEL)
    cache_inputs = [port for port in model.inputs if port.get_any_name().startswith(("past_key.", "past_value."))]
    assert cache_inputs and draft_cache_layout_is_current(model)
    for port in cache_inputs:
        consumers = [target.get_node() for target in port.get_target_inputs()]
        kinds = {node.get_type_name() for node in consumers}
        assert "MatMul" in kinds and kinds <= {"MatMul", "ShapeOf"}, f"{port.get_any_name()} feeds {kinds}"
        if port.get_any_name().startswith("past_key."):
            assert all(node.get_attributes()["transpose_b"] for node in consumers if node.get_type_name() == "MatMul")


def test_a_backbone_exported_by_older_code_is_refused(exported, tmp_path):
    """A sequence-major cache input (draft IR format 1) is named as older code's, not run."""
    old = tmp_path / "old"
    shutil.copytree(exported["tiny"], old)
    model = ov.Core().read_model(exported["tiny"] / DRAFT_MODEL)  # not the copy: saving over a mapped file
    parameter = model.input("past_key.0").get_node()
    kv_heads, head_dim = (parameter.get_partial_shape()[i].get_length() for i in (1, 3))
    parameter.set_partial_shape(ov.PartialShape([1, -1, kv_heads, head_dim]))
    ov.save_model(model, old / DRAFT_MODEL, compress_to_fp16=False)
    with pytest.raises(ValueError, match="exported by older code"):
        DraftModel(old)


def _reference_block(model, seed):
    """[B, Vd] reference logits and [1, B, H] hidden states of one block over a fresh context."""
    block, context = _random_inputs(model, new_len=5, seed=seed)
    with torch.no_grad():
        hidden = model.forward_block(block, context, DraftContextCache(model.config.num_hidden_layers))
        return model.logits(hidden[0]), hidden


@pytest.mark.parametrize("name", ["strong", "unusual"])
def test_both_walks_and_confidences_match_the_reference(name, exported, reference):
    model, head = reference[name], MarkovHead(exported[name], properties=F32_PROPERTIES)
    config = model.config
    top_ks = (0, config.markov_top_k, 3, config.draft_vocab_size + 10)
    moved = 0
    for seed, anchor in enumerate((0, config.mask_token_id, int(model.target_ids[-1]), config.vocab_size - 1)):
        logits, hidden = _reference_block(model, seed)
        for top_k in top_ks:
            expected = propose(model, hidden, anchor=anchor, num_tokens=config.block_size, markov_head_top_k=top_k)
            token_ids, confidences = head.walk(logits.numpy(), hidden[0].numpy(), anchor=anchor,
                                               num_tokens=config.block_size, top_k=top_k)
            assert tuple(token_ids.tolist()) == expected.target_ids, (anchor, top_k)
            np.testing.assert_allclose(confidences, expected.confidences, atol=CONFIDENCE_ATOL, rtol=0)
            moved += expected.target_ids != tuple(int(model.target_ids[i]) for i in logits.argmax(-1))
    assert moved, "the Markov head never changed a token: this test could not tell the walks from an argmax"


def test_a_shorter_proposal_is_the_prefix_of_the_walk(exported, reference):
    logits, hidden = _reference_block(reference["strong"], seed=7)
    head = MarkovHead(exported["strong"], properties=F32_PROPERTIES)
    whole, whole_confidences = head.walk(logits.numpy(), hidden[0].numpy(), anchor=3, num_tokens=8)
    part, part_confidences = head.walk(logits.numpy(), hidden[0].numpy(), anchor=3, num_tokens=3)
    assert part.tolist() == whole[:3].tolist()
    np.testing.assert_array_equal(part_confidences, whole_confidences[:3])
    with pytest.raises(ValueError, match="num_tokens=9"):
        head.walk(logits.numpy(), hidden[0].numpy(), anchor=3, num_tokens=9)


def test_ties_go_to_the_smallest_draft_id_in_both_walks(exported, reference):
    model, head = reference["tiny"], MarkovHead(exported["tiny"], properties=F32_PROPERTIES)
    config = model.config
    # Logits that are multiples of 2**24 absorb the small Markov bias (|b| < 1) in float32 rounding, in PyTorch
    # and OpenVINO alike, so each row ties exactly between all ids that share its largest multiple.
    multiples = np.random.default_rng(0).integers(1, 8, size=(config.block_size, config.draft_vocab_size))
    logits = (multiples * 2.0 ** 24).astype(np.float32)
    hidden = np.zeros((config.block_size, config.hidden_size), np.float32)
    first_maxima = [int(np.flatnonzero(row == row.max())[0]) for row in multiples]
    for anchor in (1, 50, 400):
        with torch.no_grad():
            dense_ids, _ = dense_walk(model, torch.from_numpy(logits), anchor=anchor)
            covering_ids, _ = top_k_walk(model, torch.from_numpy(logits), anchor=anchor,
                                         top_k=config.draft_vocab_size)
        assert dense_ids == covering_ids == first_maxima
        for top_k in (0, config.draft_vocab_size):
            token_ids, _ = head.walk(logits, hidden, anchor=anchor, num_tokens=config.block_size, top_k=top_k)
            assert token_ids.tolist() == model.target_ids[dense_ids].tolist(), top_k


def test_backbone_then_markov_head_proposes_what_the_reference_proposes(exported, reference):
    model, runtime = reference["strong"], DraftModel(exported["strong"], properties=F32_PROPERTIES)
    head = MarkovHead(exported["strong"], properties=F32_PROPERTIES)
    cache = DraftContextCache(model.config.num_hidden_layers)
    for seed, (new_len, anchor) in enumerate(((9, 4), (2, 77), (5, 300))):
        block, context = _random_inputs(model, new_len=new_len, seed=seed)
        with torch.no_grad():
            expected = propose(model, model.forward_block(block, context, cache), anchor=anchor, num_tokens=6,
                               markov_head_top_k=model.config.markov_top_k)
        logits, hidden = runtime.forward_block(block.numpy(), context.numpy())
        token_ids, confidences = head.walk(logits, hidden, anchor=anchor, num_tokens=6)
        assert tuple(token_ids.tolist()) == expected.target_ids
        np.testing.assert_allclose(confidences, expected.confidences, atol=CONFIDENCE_ATOL, rtol=0)


@pytest.mark.parametrize("name", ["tiny", "unusual"])
def test_d2t_is_an_int64_constant_output_equal_to_the_checkpoint(name, drafts, exported):
    model = ov.Core().read_model(exported[name] / DRAFT_MODEL)
    assert model.output("d2t").get_element_type() == ov.Type.i64
    d2t = read_d2t(model)
    np.testing.assert_array_equal(d2t, load_file(str(drafts[name] / DRAFT_WEIGHTS))["d2t"])
    listed = json.loads((exported[name] / LOCAL_TO_TARGET).read_text())
    assert (np.arange(d2t.size) + d2t).tolist() == listed
    inputs = {port.get_any_name(): np.zeros([0 if dim.is_dynamic else dim.get_length()
                                             for dim in port.get_partial_shape()], port.get_element_type().to_dtype())
              for port in model.inputs}
    received = ov.Core().compile_model(model, "CPU")(inputs)["d2t"]  # an empty call (N = B = C = 0) still returns it
    np.testing.assert_array_equal(received, d2t)


@pytest.mark.parametrize("name", ["tiny", "unusual"])
def test_rt_info_records_what_a_runtime_needs(name, drafts, exported):
    config = load_reference_draft(drafts[name]).config
    expected = {"draft_mode": "dspark", "target_layer_ids": json.dumps(list(config.target_layer_ids)),
                "mask_token_id": str(config.mask_token_id), "block_size": str(config.block_size),
                "vocab_size": str(config.vocab_size), "draft_vocab_size": str(config.draft_vocab_size),
                "markov_rank": str(config.markov_rank), "markov_head_type": "vanilla",
                "top_k": str(min(64, config.draft_vocab_size)), "confidence_head": "true"}
    assert set(expected) == set(RT_INFO_KEYS)
    for file in (DRAFT_MODEL, MARKOV_HEAD_MODEL):
        model = ov.Core().read_model(exported[name] / file)
        stored = {key: model.get_rt_info([RT_INFO_NAMESPACE, key]).astype(str) for key in RT_INFO_KEYS}
        assert stored == expected, file
        assert read_draft_info(model).top_k == min(64, config.draft_vocab_size)


def _constants(model: ov.Model):
    """Every Constant of a model, those of `If` bodies included (an earlier layout kept a table per body)."""
    for node in model.get_ordered_ops():
        if node.get_type_name() == "Constant":
            yield node
        if node.get_type_name() == "If":
            for body in (node.get_then_body(), node.get_else_body()):
                yield from _constants(body)


@pytest.mark.parametrize("name", ["tiny", "unusual"])
def test_markov_head_ir_holds_each_table_once(name, drafts, exported):
    tensors = load_file(str(drafts[name] / DRAFT_WEIGHTS))
    tables = {key: tensors[f"markov_head.{key}.weight"] for key in ("markov_w1", "markov_w2")}
    assert tables["markov_w1"].shape != tables["markov_w2"].shape  # pruned: shapes tell the tables apart
    path = exported[name] / MARKOV_HEAD_MODEL
    stored = {}
    for constant in _constants(ov.Core().read_model(path)):
        shape = tuple(constant.get_output_shape(0))
        stored[shape] = stored.get(shape, 0) + constant.get_byte_size()
    for key, table in tables.items():
        assert stored[table.shape] == table.nbytes, (key, stored[table.shape] / table.nbytes)
    # beside the tables: draft-to-target ids and draft ids (int64 [Vd] each), the confidence head, scalars
    table_bytes = sum(table.nbytes for table in tables.values())
    others = 2 * 8 * tables["markov_w2"].shape[0] + tensors["confidence_head.proj.weight"].nbytes + 4096
    assert table_bytes < path.with_suffix(".bin").stat().st_size < table_bytes + others


def test_unusual_draft_has_ports_shaped_by_its_config(exported):
    backbone = ov.Core().read_model(exported["unusual"] / DRAFT_MODEL)
    head = ov.Core().read_model(exported["unusual"] / MARKOV_HEAD_MODEL)
    shapes = {port.get_any_name(): str(port.get_partial_shape()) for port in [*backbone.inputs, *backbone.outputs,
                                                                            *head.inputs, *head.outputs]}
    hidden = 64
    assert shapes["hidden_states"] == f"[1,?,{4 * hidden}]"  # four target layers
    assert shapes["logits"] == "[5,37]"  # the head's input: a whole block over the draft vocabulary
    assert str(backbone.output("logits").get_partial_shape()) == "[1,?,37]"
    assert shapes["d2t"] == "[37]"
    assert shapes["token_ids"] == shapes["confidences"] == "[5]"
    assert {"past_key.0", "past_value.1", "present_key.1"} <= set(shapes)
    assert "past_key.2" not in shapes  # two draft layers


def test_export_copies_config_and_local_to_target(drafts, exported):
    for name in ("config.json", LOCAL_TO_TARGET):
        assert (exported["tiny"] / name).read_bytes() == (drafts["tiny"] / name).read_bytes()
    assert sorted(path.name for path in exported["tiny"].iterdir()) == sorted(
        ["config.json", LOCAL_TO_TARGET, DRAFT_MODEL, DRAFT_MODEL.replace(".xml", ".bin"), MARKOV_HEAD_MODEL,
         MARKOV_HEAD_MODEL.replace(".xml", ".bin")])


def _folders(parent):
    return sorted(path.name for path in parent.iterdir())


def test_a_failed_export_leaves_nothing_and_keeps_an_earlier_one(tiny_pair, exported, monkeypatch, tmp_path):
    def fail(*args, **kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(draft_export, "_copy_source_files", fail)  # the last step: both IRs are written by then
    with pytest.raises(RuntimeError, match="interrupted"):
        export_draft(tiny_pair.draft, tmp_path / "draft-ov")
    assert _folders(tmp_path) == []
    earlier = shutil.copytree(exported["tiny"], tmp_path / "earlier")
    with pytest.raises(RuntimeError, match="interrupted"):
        export_draft(tiny_pair.draft, earlier, overwrite=True)
    assert _folders(tmp_path) == ["earlier"]
    assert _folders(earlier) == _folders(exported["tiny"])


def test_a_broken_draft_is_rejected_before_anything_is_written(tiny_pair, monkeypatch, tmp_path):
    def shifted(tensors):
        tensors["d2t"] = tensors["d2t"] + 1

    broken = _copy_draft(tiny_pair.draft, tmp_path / "broken", edit_tensors=shifted)
    monkeypatch.setattr(draft_export, "convert_backbone", pytest.fail)
    with pytest.raises(DraftValidationError, match="d2t disagrees with local-to-target.json"):
        export_draft(broken, tmp_path / "out")
    assert _folders(tmp_path) == ["broken"]


def test_a_draft_without_markov_head_is_rejected(tiny_pair, tmp_path):
    def drop_markov(tensors):
        for name in ("markov_head.markov_w1.weight", "markov_head.markov_w2.weight"):
            del tensors[name]
        tensors["confidence_head.proj.weight"] = tensors["confidence_head.proj.weight"][:, :64]

    def no_markov(config):
        config["dflash_config"] |= {"markov_rank": 0, "confidence_head_with_markov": False}

    source = _copy_draft(tiny_pair.draft, tmp_path / "plain", edit_tensors=drop_markov, edit_config=no_markov)
    with pytest.raises(DraftValidationError, match="markov_rank=0"):
        export_draft(source, tmp_path / "out")


def test_a_draft_without_confidence_head_exports_a_head_without_confidences(tiny_pair, tmp_path):
    def drop_confidence(tensors):
        del tensors["confidence_head.proj.weight"], tensors["confidence_head.proj.bias"]

    def no_confidence(config):
        config["dflash_config"] |= {"enable_confidence_head": False, "confidence_head_with_markov": False}

    source = _copy_draft(tiny_pair.draft, tmp_path / "src", edit_tensors=drop_confidence, edit_config=no_confidence)
    head = MarkovHead(export_draft(source, tmp_path / "out"), properties=F32_PROPERTIES)
    model = load_reference_draft(source)
    logits, hidden = _reference_block(model, seed=3)
    expected = propose(model, hidden, anchor=9, num_tokens=8, markov_head_top_k=64)
    token_ids, confidences = head.walk(logits.numpy(), hidden[0].numpy(), anchor=9, num_tokens=8)
    assert (tuple(token_ids.tolist()), confidences, expected.confidences) == (expected.target_ids, None, None)
    assert not head.info.confidence_head


@pytest.fixture(scope="module")
def fp16_export(tiny_pair, tmp_path_factory):
    """The tiny draft exported through the command line with fp16 weights."""
    out = tmp_path_factory.mktemp("cli") / "draft-fp16"
    assert export_cli(["draft", "--model", str(tiny_pair.draft), "--out", str(out), "--weight-format", "fp16"]) == 0
    return out


def test_cli_exports_and_rejects_with_exit_code_2(tiny_pair, fp16_export, tmp_path, capsys):
    assert (fp16_export / DRAFT_MODEL).is_file() and (fp16_export / MARKOV_HEAD_MODEL).is_file()
    capsys.readouterr()
    assert export_cli(["draft", "--model", str(tiny_pair.draft), "--out", str(fp16_export)]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert export_cli(["draft", "--model", str(tiny_pair.target), "--out", str(tmp_path / "out")]) == 2
    assert "is not a DSpark draft" in capsys.readouterr().err
    assert _folders(tmp_path) == []
    with pytest.raises(SystemExit):
        export_cli(["draft", "--model", str(tiny_pair.draft), "--out", str(tmp_path / "x"), "--weight-format", "int3"])


def test_fp16_export_is_smaller_and_close_to_the_reference(fp16_export, exported, reference):
    def weight_bytes(folder):
        return (folder / DRAFT_MODEL.replace(".xml", ".bin")).stat().st_size

    assert weight_bytes(fp16_export) < 0.6 * weight_bytes(exported["tiny"])
    model, runtime = reference["tiny"], DraftModel(fp16_export, properties=F32_PROPERTIES)
    block, context = _random_inputs(model, new_len=6, seed=0)
    with torch.no_grad():
        logits = model.logits(model.forward_block(block, context, DraftContextCache(model.config.num_hidden_layers)))
    ov_logits, _ = runtime.forward_block(block.numpy(), context.numpy())
    difference = np.abs(ov_logits - logits[0].numpy()).max()
    assert 0 < difference <= FP16_ATOL  # > 0: the weights really are fp16


def test_runtime_driver_runs_without_torch(exported, run_without_torch):
    run_without_torch(f"""
import numpy as np
from utils.engine.draft import DraftModel, MarkovHead
draft, head = DraftModel({str(exported['tiny'])!r}), MarkovHead({str(exported['tiny'])!r})
logits, hidden = draft.forward_block(np.zeros((1, 8, 64), np.float32), np.ones((1, 3, 192), np.float32))
token_ids, confidences = head.walk(logits, hidden, anchor=1, num_tokens=8)
assert token_ids.shape == confidences.shape == (8,) and draft.length == 3
""")
