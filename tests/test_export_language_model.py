"""The language-model IR and its numpy driver against transformers, on the tiny target (fp32 IR, CPU, f32 hint).

Every parity check feeds the same `inputs_embeds` (image features from transformers scattered in) to both
sides. Tolerance: max abs diff <= 1e-4 on logits and hidden states (the tiny model's fp32 rounding between
two correct implementations is ~1e-5). The export uses chunks of CHUNK_SIZE tokens in the gated delta rule, so
that prompt chunks and verification blocks span several chunks (the last one partial) and single tokens leave
chunk slots of the graph empty.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from utils.checkpoint.config import DSparkConfig
from utils.contract import (HIDDEN_STATES_RT_INFO_KEY, LANGUAGE_MODEL_CONFIG, LANGUAGE_MODEL_NAME, NUM_LOGITS,
                            LanguageModelConfig, present_key, rollback_delta, rollback_key, rollback_log_decay)
from utils.engine.device import F32_PROPERTIES
from utils.engine.language_model import LanguageModelSession, rebuild_recurrent_state
from utils.export.language_model import export_language_model

TOLERANCE = 1e-4
PREFILL_CHUNK = 16  # small, so that prompts span several calls
CHUNK_SIZE = 4  # gated-delta chunk: a prompt call has 4 chunks, a block of 9 tokens 3, a single token 1 of 4
PROMPTS = [  # (image size, colour, instruction)
    ((180, 90), "white", "Text Recognition:"),
    ((60, 140), "black", "Read the receipt."),
    ((120, 120), "gray", "OCR:"),
]


@pytest.fixture(scope="module")
def target(tiny_pair):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(tiny_pair.target).eval()


@pytest.fixture(scope="module")
def hidden_layer_ids(tiny_pair):
    return list(DSparkConfig.from_folder(tiny_pair.draft).target_layer_ids)


@pytest.fixture(scope="module")
def exported(tiny_pair, target, hidden_layer_ids, tmp_path_factory):
    folder = tmp_path_factory.mktemp("language_model")
    block_size = json.loads((tiny_pair.draft / "config.json").read_text())["block_size"]
    export_language_model(target, folder, hidden_layer_ids=hidden_layer_ids, verify_length=block_size + 1,
                          prefill_chunk=PREFILL_CHUNK, chunk_size=CHUNK_SIZE)
    return folder


@pytest.fixture(scope="module")
def session(exported):
    return LanguageModelSession(exported, device="CPU", properties=F32_PROPERTIES, max_length=1024)


@pytest.fixture(scope="module")
def prompts(tiny_pair, target):
    """Processor inputs and their inputs_embeds [T, H] (numpy) for each entry of PROMPTS."""
    from PIL import Image
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_pair.target)
    built = []
    for size, colour, text in PROMPTS:
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = processor(images=[Image.new("RGB", size, colour)], text=[prompt], return_tensors="pt")
        built.append((inputs, _inputs_embeds(target, inputs)))
    return built


def _inputs_embeds(model, inputs) -> np.ndarray:
    """Token embeddings with the image features scattered in at the image tokens, as MiniCPM-OCR does."""
    import torch

    with torch.no_grad():
        embeds = model.get_input_embeddings()(inputs["input_ids"])
        features = model.get_image_features(inputs["pixel_values"][:1], inputs["target_sizes"]).pooler_output
        mask = (inputs["input_ids"] == model.config.image_token_id).unsqueeze(-1).expand_as(embeds)
        embeds = embeds.masked_scatter(mask, torch.cat(features, dim=0))
    return embeds[0].numpy()


def _reference(model, embeds: np.ndarray, layer_ids) -> tuple[np.ndarray, np.ndarray]:
    """transformers' logits [T, V] and concatenated decoder-layer outputs [T, n*H] for inputs_embeds [T, H]."""
    import torch

    with torch.no_grad():
        output = model(inputs_embeds=torch.from_numpy(embeds)[None], output_hidden_states=True)
    hidden = torch.cat([output.hidden_states[i + 1] for i in layer_ids], dim=-1)
    return output.logits[0].numpy(), hidden[0].numpy()


def _token_embeds(model, token_ids) -> np.ndarray:
    return model.get_input_embeddings().weight.detach().numpy()[np.asarray(token_ids)]


def _max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a) - np.asarray(b)).max())


@pytest.mark.parametrize("length", [3 * PREFILL_CHUNK + 7, 2 * PREFILL_CHUNK, 5])
def test_prefill_matches_transformers(session, target, prompts, hidden_layer_ids, length):
    """Lengths: several calls with a shorter last one, whole calls, and less than one call."""
    embeds = prompts[0][1][:length]
    assert len(embeds) == length
    session.reset()
    logits, hidden = session.prefill(embeds)
    ref_logits, ref_hidden = _reference(target, embeds, hidden_layer_ids)
    assert session.past_length == len(embeds)
    assert _max_diff(logits, ref_logits[-1]) <= TOLERANCE
    assert hidden.shape == ref_hidden.shape and _max_diff(hidden, ref_hidden) <= TOLERANCE


def test_prefill_after_earlier_text_matches_transformers(session, target, prompts, hidden_layer_ids):
    first, more = prompts[0][1], prompts[1][1][:PREFILL_CHUNK + 5]  # continues mid-chunk
    session.reset()
    session.prefill(first)
    logits, hidden = session.prefill(more)
    ref_logits, ref_hidden = _reference(target, np.concatenate([first, more]), hidden_layer_ids)
    assert _max_diff(logits, ref_logits[-1]) <= TOLERANCE
    assert _max_diff(hidden, ref_hidden[len(first):]) <= TOLERANCE


@pytest.fixture(scope="module")
def verify_case(target, prompts, hidden_layer_ids):
    """A prompt, a 9-token block, the token after it, and transformers' logits/hidden states on them."""
    prompt = prompts[0][1][:40]
    block = _token_embeds(target, [17, 230, 5, 998, 64, 301, 77, 412, 9])
    following = _token_embeds(target, [42])
    block_logits, block_hidden = _reference(target, np.concatenate([prompt, block]), hidden_layer_ids)
    unrolled = _reference(target, np.concatenate([prompt, block, following]), hidden_layer_ids)[0][-1]
    return {"prompt": prompt, "block": block, "following": following, "unrolled_logits": unrolled,
            "block_logits": block_logits[len(prompt):], "block_hidden": block_hidden[len(prompt):]}


@pytest.mark.parametrize("block_length, accepted", [(9, 1), (9, 4), (9, 9), (5, 3), (5, 5)])
def test_verify_then_accept_continues_like_transformers(session, target, verify_case, hidden_layer_ids,
                                                        block_length, accepted):
    """accepted = 1 keeps only the anchor (no draft accepted); a block of 5 runs as it is (S is dynamic)."""
    prompt, block, following = verify_case["prompt"], verify_case["block"][:block_length], verify_case["following"]
    session.reset()
    session.prefill(prompt)
    logits, hidden = session.verify(block)
    assert _max_diff(logits, verify_case["block_logits"][:block_length]) <= TOLERANCE
    assert _max_diff(hidden, verify_case["block_hidden"][:block_length]) <= TOLERANCE

    session.accept(accepted)
    assert session.past_length == len(prompt) + accepted
    next_logits, _ = session.decode_one(following[0])
    expected = _reference(target, np.concatenate([prompt, block[:accepted], following]), hidden_layer_ids)[0][-1]
    assert _max_diff(next_logits, expected) <= TOLERANCE
    if accepted < len(verify_case["block"]):  # the check can fail: keeping the whole block gives other logits
        assert _max_diff(verify_case["unrolled_logits"], expected) > 100 * TOLERANCE


def test_the_cut_and_the_rollback_redone_from_the_verified_outputs_give_the_accepted_state(session, verify_case):
    """What notebook 07 does by hand: keep the first n K/V rows, rebuild the recurrent state, compare."""
    linear, full = session.linear_attention_layers[0], next(
        layer for layer in range(len(session.config.layer_types)) if layer not in session.linear_attention_layers)
    for accepted in (3, 9):
        session.reset()
        session.prefill(verify_case["prompt"])
        keys_before, state_before = session.key_cache(full), session.recurrent_state(linear)
        session.verify(verify_case["block"])
        block_keys = session.verified_output(present_key(full))
        terms = [session.verified_output(name(linear)) for name in (rollback_key, rollback_delta, rollback_log_decay)]
        session.accept(accepted)
        assert np.array_equal(session.key_cache(full), np.concatenate([keys_before, block_keys[:, :accepted]], 1))
        assert _max_diff(session.recurrent_state(linear), rebuild_recurrent_state(state_before, *terms, accepted)) <= 1e-5
        assert _max_diff(state_before, session.recurrent_state(linear)) > 1e-3  # the check can fail
    with pytest.raises(ValueError, match="verify"):
        session.verified_output(present_key(full))
    with pytest.raises(ValueError, match="no full attention"):
        session.key_cache(linear)


def test_rebuild_recurrent_state_matches_the_recurrence_step_by_step():
    """float32 in and out, as the session holds its states; the recurrence here runs in float64."""
    rng = np.random.default_rng(0)
    heads, dim_k, dim_v, length = 3, 4, 5, 7
    state = rng.normal(size=(1, heads, dim_k, dim_v)).astype(np.float32)
    keys = rng.normal(size=(1, length, heads, dim_k)).astype(np.float32)
    deltas = rng.normal(size=(1, length, heads, dim_v)).astype(np.float32)
    log_decay = -rng.uniform(0.0, 2.0, size=(1, length, heads)).astype(np.float32)
    expected = state.astype(np.float64)
    for count in range(1, length + 1):
        t = count - 1
        expected = (expected * np.exp(log_decay[0, t].astype(np.float64))[None, :, None, None]
                    + np.einsum("hk,hv->hkv", keys[0, t], deltas[0, t].astype(np.float64))[None])
        rebuilt = rebuild_recurrent_state(state, keys, deltas, log_decay, count)
        assert rebuilt.dtype == np.float32 and _max_diff(rebuilt, expected) <= 1e-5
        in_place = state.copy()
        assert rebuild_recurrent_state(in_place, keys, deltas, log_decay, count, out=in_place) is in_place
        np.testing.assert_array_equal(in_place, rebuilt)


def _greedy_with_verify(session, target, embeds, expected, eos_token_id, block_length):
    """Greedy decoding through verify/accept with drafts taken from `expected`, one draft in three wrong."""
    logits, _ = session.prefill(embeds)
    tokens = [int(np.argmax(logits))]
    while len(tokens) < len(expected) and tokens[-1] != eos_token_id:
        drafts = list(expected[len(tokens):len(tokens) + block_length - 1])
        if len(tokens) % 3 == 0 and drafts:
            drafts[len(drafts) // 2] = (drafts[len(drafts) // 2] + 1) % 1000
        block_logits, _ = session.verify(_token_embeds(target, [tokens[-1], *drafts]))
        predicted = np.argmax(block_logits, axis=-1)
        accepted = 0
        while accepted < len(drafts) and drafts[accepted] == predicted[accepted]:
            accepted += 1
        session.accept(accepted + 1)
        tokens += drafts[:accepted] + [int(predicted[accepted])]
        if eos_token_id in tokens:
            tokens = tokens[:tokens.index(eos_token_id) + 1]
    return tokens[:len(expected)]


def _greedy_with_decode(session, target, embeds, max_new_tokens, eos_token_id):
    logits, _ = session.prefill(embeds)
    tokens = [int(np.argmax(logits))]
    while len(tokens) < max_new_tokens and tokens[-1] != eos_token_id:
        logits, _ = session.decode_one(_token_embeds(target, [tokens[-1]])[0])
        tokens.append(int(np.argmax(logits)))
    return tokens


@pytest.mark.parametrize("prompt_index", range(len(PROMPTS)))
def test_greedy_decoding_matches_transformers_generate(session, target, prompts, prompt_index):
    import torch

    inputs, embeds = prompts[prompt_index]
    max_new_tokens = 24
    with torch.no_grad():
        generated = target.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    expected = generated[0, inputs["input_ids"].shape[1]:].tolist()
    eos = target.generation_config.eos_token_id

    session.reset()
    assert _greedy_with_decode(session, target, embeds, max_new_tokens, eos) == expected
    session.reset()
    block_length = session.verify_length
    assert _greedy_with_verify(session, target, embeds, expected, eos, block_length) == expected


def test_rt_info_locates_every_decoder_layer_output(exported, target, prompts, hidden_layer_ids):
    import openvino as ov
    import torch

    core = ov.Core()
    num_layers = target.config.text_config.num_hidden_layers
    model = core.read_model(exported / LANGUAGE_MODEL_NAME)
    layers = json.loads(model.get_rt_info()[HIDDEN_STATES_RT_INFO_KEY].value)["layers"]
    assert set(layers) == {str(i) for i in range(num_layers)}
    by_name = {op.get_friendly_name(): op for op in model.get_ops()}
    producers = [by_name[layers[str(i)]["producer"]].output(layers[str(i)]["output_index"]) for i in range(num_layers)]
    assert sum(op.get_friendly_name() == layers["0"]["producer"] for op in model.get_ops()) == 1
    concat = model.output("hidden_states").get_node().input_value(0).get_node()
    assert [value.get_node().get_friendly_name() for value in concat.input_values()] == [
        producers[i].get_node().get_friendly_name() for i in hidden_layer_ids]

    model.add_outputs(producers)  # run from an empty state
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    length = LanguageModelConfig.read(exported).verify_length
    embeds = prompts[0][1][:length]
    inputs = {"inputs_embeds": embeds[None], "position_ids": np.arange(length)[None],
              "attention_mask": np.ones((1, length), np.int64), NUM_LOGITS: np.array(length)}
    for port in model.inputs[4:]:
        shape = [0 if dim.is_dynamic else dim.get_length() for dim in port.get_partial_shape()]
        inputs[port.get_any_name()] = np.zeros(shape, np.float32)
    results = compiled(inputs)
    with torch.no_grad():
        reference = target(inputs_embeds=torch.from_numpy(embeds)[None], output_hidden_states=True).hidden_states
    for layer_id in range(num_layers - 1):  # HF's last entry is after the final norm
        produced = results[compiled.outputs[len(model.outputs) - num_layers + layer_id]]
        assert _max_diff(produced[0], reference[layer_id + 1][0].numpy()) <= TOLERANCE, layer_id


def test_export_writes_one_ir_of_dynamic_length_and_its_description(exported, hidden_layer_ids, session):
    import openvino as ov

    description = json.loads((exported / LANGUAGE_MODEL_CONFIG).read_text())
    assert description["hidden_layer_ids"] == hidden_layer_ids
    assert (description["file"], description["prefill_chunk"], description["verify_length"]) == (
        LANGUAGE_MODEL_NAME, PREFILL_CHUNK, session.verify_length)
    assert description["max_tokens"] == max(PREFILL_CHUNK, session.verify_length)
    assert sorted(path.name for path in exported.glob("*.bin")) == [LANGUAGE_MODEL_NAME.replace(".xml", ".bin")]
    model = ov.Core().read_model(exported / LANGUAGE_MODEL_NAME)
    assert model.input("inputs_embeds").get_partial_shape()[1].is_dynamic
    assert session.clock.seconds > 0 and session.host_seconds >= 0
    assert session.call_clock.seconds > session.clock.seconds


def test_past_keys_reach_the_attention_scores_as_rows(exported):
    """A key is a row of head_dim floats; transposing the cache to [head_dim, P] moved single floats and cost a
    decode step at 3k context a fifth of its time (`docs/performance.md`). The scores' MatMul takes the keys
    transposed instead, and every Transpose on the way keeps the last axis last."""
    import openvino as ov

    model = ov.Core().read_model(exported / LANGUAGE_MODEL_NAME)
    past_keys = [port for port in model.inputs if port.get_any_name().startswith("past_key")]
    assert past_keys
    for port in past_keys:
        frontier, score_matmuls = [port.get_node()], []
        while frontier:
            node = frontier.pop()
            for consumer in (target.get_node() for output in node.outputs() for target in output.get_target_inputs()):
                kind = consumer.get_type_name()
                if kind == "Transpose":
                    order = consumer.input(1).get_source_output().get_node().get_data()
                    assert order[-1] == len(order) - 1, (port.get_any_name(), order)
                if kind == "MatMul":
                    score_matmuls.append(consumer)
                elif kind not in ("ShapeOf", "Gather"):
                    frontier.append(consumer)
        assert [matmul.get_attributes()["transpose_b"] for matmul in score_matmuls] == [True], port.get_any_name()


class _CountingCore:
    """An `ov.Core` that counts the models compiled through it."""

    def __init__(self):
        import openvino as ov

        self.core, self.compiled = ov.Core(), []

    def compile_model(self, model, *args, **kwargs):
        self.compiled.append(model)
        return self.core.compile_model(model, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.core, name)


def test_the_session_compiles_the_weights_once_for_every_kind_of_call(exported, verify_case):
    """OpenVINO's CPU plugin keeps a copy of the weights per compiled model, so one compiled model is one copy."""
    core = _CountingCore()
    session = LanguageModelSession(exported, properties=F32_PROPERTIES, max_length=256, core=core)
    session.prefill(verify_case["prompt"])
    session.verify(verify_case["block"])
    session.accept(2)
    session.decode_one(verify_case["following"][0])
    assert [str(model) for model in core.compiled] == [str(exported / LANGUAGE_MODEL_NAME)]


def test_calls_of_every_length_up_to_max_tokens_match_transformers(session, target, prompts, hidden_layer_ids):
    """One call of each length 1..max_tokens after a prompt: one partial chunk to several, whole and partial."""
    prompt, more = prompts[0][1][:21], prompts[1][1]
    assert session.config.max_tokens == session.prefill_chunk <= len(more)
    for count in range(1, session.config.max_tokens + 1):
        session.reset()
        session.prefill(prompt)
        logits, hidden = session.prefill(more[:count])
        ref_logits, ref_hidden = _reference(target, np.concatenate([prompt, more[:count]]), hidden_layer_ids)
        assert _max_diff(logits, ref_logits[-1]) <= TOLERANCE, count
        assert _max_diff(hidden, ref_hidden[len(prompt):]) <= TOLERANCE, count


@pytest.mark.parametrize("length", [1, 3, 4, 9, 12])
def test_chunked_gated_delta_rule_matches_the_token_by_token_recurrence(length):
    """float64, so that the only difference is the algorithm: tolerance 1e-10."""
    import torch

    from utils.export.gated_delta import chunk_gated_delta_rule

    generator = torch.Generator().manual_seed(length)
    heads, dim_k, dim_v = 2, 3, 5

    def normal(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    query = torch.nn.functional.normalize(normal(1, heads, length, dim_k), dim=-1) * dim_k ** -0.5
    key = torch.nn.functional.normalize(normal(1, heads, length, dim_k), dim=-1)
    value, state = normal(1, heads, length, dim_v), normal(1, heads, dim_k, dim_v)
    log_decay, beta = -normal(1, heads, length).abs(), torch.sigmoid(normal(1, heads, length))
    output, final_state, delta = chunk_gated_delta_rule(query, key, value, log_decay, beta, state, max_length=12,
                                                        chunk_size=4)
    expected = state.clone()
    for t in range(length):
        expected = expected * log_decay[..., t, None, None].exp()
        correction = beta[..., t, None] * (value[..., t, :] - (expected * key[..., t, :, None]).sum(-2))
        expected = expected + key[..., t, :, None] * correction[..., None, :]
        assert _max_diff(delta[..., t, :], correction) <= 1e-10
        assert _max_diff(output[..., t, :], (expected * query[..., t, :, None]).sum(-2)) <= 1e-10
    assert _max_diff(final_state, expected) <= 1e-10


@pytest.mark.parametrize("options, message", [
    ({"hidden_layer_ids": [1, 99]}, "out of range"),
    ({"hidden_layer_ids": [1, 1]}, "repeats"),
    ({"hidden_layer_ids": [1], "weight_format": "int3"}, "weight_format"),
    ({"hidden_layer_ids": [1], "verify_length": 0}, "verify_length"),
])
def test_export_rejects_bad_options(target, tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        export_language_model(target, tmp_path, **{"verify_length": 9, **options})


def test_session_rejects_bad_calls(session, prompts):
    session.reset()
    with pytest.raises(ValueError, match="verify"):
        session.accept(1)
    with pytest.raises(ValueError, match="expected"):
        session.prefill(np.zeros((3, 7), np.float32))
    with pytest.raises(ValueError, match="verify_length"):
        session.verify(np.zeros((session.verify_length + 1, prompts[0][1].shape[1]), np.float32))
    session.verify(prompts[0][1][:3])
    with pytest.raises(ValueError, match="n_tokens"):
        session.accept(4)


def test_driver_imports_neither_torch_nor_transformers(run_without_torch):
    run_without_torch("import utils.engine.language_model")
