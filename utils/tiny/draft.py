"""The tiny DSpark draft, laid out like openbmb/MiniCPM-OCR-1.0-DSpark (random weights).

Published layout (docs/ir-contract.md, docs/real-checkpoints-settings.md): `config.json` with
`architectures: ["Qwen3DSparkModel"]` and a `dflash_config` block; `model.safetensors` with 11 tensors per layer,
`fc`, `hidden_norm`, `norm`, `lm_head` over the draft vocabulary, the vanilla Markov head (`markov_w1` over the input
vocabulary, `markov_w2` rows cropped to the draft vocabulary), the confidence head and the delta-encoded `d2t`; no
embedding table (the draft embeds with the target's); `local-to-target.json` with the absolute target ids;
`export-audit.json`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from utils.checkpoint.config import DSparkConfig
from utils.checkpoint.draft import DRAFT_WEIGHTS, EXPORT_AUDIT, LOCAL_TO_TARGET, draft_tensor_shapes
from utils.files import sha256_file

__all__ = ["sample_draft_vocabulary", "random_draft_weights", "build_tiny_draft"]

def sample_draft_vocabulary(rng: np.random.Generator, *, vocab_size: int, draft_vocab_size: int,
                            eos_token_id: int) -> np.ndarray:
    """A random, unsorted subset of `draft_vocab_size` target ids below `vocab_size` that contains EOS."""
    others = np.delete(np.arange(vocab_size), eos_token_id)
    chosen = rng.choice(others, size=draft_vocab_size - 1, replace=False)
    ids = np.append(chosen, eos_token_id)
    rng.shuffle(ids)
    return ids.astype(np.int64)


def _draft_config(spec, tokenizer, input_vocab_size: int) -> dict:
    hidden = spec.hidden_size
    return {
        "architectures": ["Qwen3DSparkModel"],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": spec.draft_num_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": hidden // 4,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": 8192,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "vocab_size": input_vocab_size,
        "draft_vocab_size": spec.draft_vocab_size,
        "num_target_layers": spec.num_hidden_layers,
        "block_size": spec.block_size,
        "eos_token_id": tokenizer.eos_token_id,
        "dflash_config": {
            "target_layer_ids": list(spec.target_layer_ids),
            "mask_token_id": tokenizer.convert_tokens_to_ids(spec.mask_token),
            "markov_rank": spec.markov_rank,
            "markov_head_type": "vanilla",
            "enable_confidence_head": True,
            "confidence_head_with_markov": True,
        },
    }


def random_draft_weights(shapes: dict, rng: np.random.Generator, std: float) -> dict[str, np.ndarray]:
    """Random draft tensors for `shapes` (norm weights one, biases zero; `d2t` is left to the caller)."""
    tensors = {}
    for name, shape in shapes.items():
        if name == "d2t":
            continue
        if name.endswith("norm.weight"):
            tensors[name] = np.ones(shape, dtype=np.float32)
        elif name.endswith(".bias"):
            tensors[name] = np.zeros(shape, dtype=np.float32)
        else:
            tensors[name] = rng.normal(0.0, std, size=shape).astype(np.float32)
    return tensors


def build_tiny_draft(spec, tokenizer, out: Path) -> None:
    """Writes a random tiny DSpark draft in the published layout into `out` (an empty folder)."""
    from safetensors.numpy import save_file

    input_vocab_size = len(tokenizer)
    config = _draft_config(spec, tokenizer, input_vocab_size)
    rng = np.random.default_rng(spec.seed + 1)
    target_ids = sample_draft_vocabulary(rng, vocab_size=input_vocab_size, draft_vocab_size=spec.draft_vocab_size,
                                         eos_token_id=tokenizer.eos_token_id)
    tensors = random_draft_weights(draft_tensor_shapes(DSparkConfig.from_dict(config)), rng, spec.initializer_range)
    tensors["d2t"] = target_ids - np.arange(spec.draft_vocab_size, dtype=np.int64)

    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(dict(sorted(tensors.items())), str(out / DRAFT_WEIGHTS), metadata={"format": "pt"})
    (out / LOCAL_TO_TARGET).write_text(json.dumps(target_ids.tolist()) + "\n")
    audit = {
        "weights_sha256": sha256_file(out / DRAFT_WEIGHTS),
        "local_to_target_sha256": sha256_file(out / LOCAL_TO_TARGET),
        "d2t_encoding": "delta: target_id = draft_id + d2t[draft_id]",
        "vocabulary_coverage": {
            "input_vocab_size": input_vocab_size,
            "draft_vocab_size": spec.draft_vocab_size,
            "fraction_of_input_vocab": round(spec.draft_vocab_size / input_vocab_size, 6),
            "contains_eos": True,
        },
    }
    (out / EXPORT_AUDIT).write_text(json.dumps(audit, indent=2) + "\n")
