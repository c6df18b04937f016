"""Random models of the real pair's sizes, for the benchmarks: MiniCPM-OCR 1.0's text model and its DSpark draft.

Nothing here is downloaded: the sizes are the published ones, the weights are random. The text model is a
transformers `Qwen3_5ForCausalLM` (24 layers, every 4th full attention, hidden 1024, MLP 3584, 8 query /
2 KV heads of 256, 16 linear key/value heads of 128, vocabulary 248,320, tied embeddings: ~752M
parameters). The draft is written in the published checkpoint layout (`utils.tiny.draft` writes the tiny
one the same way): DeepSpec builds a draft config by copying the target's (`build_draft_config`), so the
draft layers have the target's hidden, MLP and attention sizes; with the confidence head reading the
Markov embedding and `markov_rank` 256 (DeepSpec's DSpark configs) this gives exactly the model card's
296,837,889 parameters for a 248,100-token input vocabulary (here the target's 248,320 rows: +56,320).

The whole target (`write_random_target`) adds the vision tower of the installed transformers' defaults
(`MiniCPMOcrVisionConfig`, which follow MiniCPM-V 4.6: hidden 768, MLP 3072, 12 layers of 12 heads, patch 16,
the window merger after layer 6) and borrows the shipped tiny pair's tokenizer: its 1,000 tokens fit in the
real vocabulary, and a random model's answers are counted, never read.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

__all__ = ["VERIFY_LENGTH", "HIDDEN_LAYER_IDS", "DRAFT_VOCAB_SIZE", "EMBEDDINGS_FILE", "real_size_text_config",
           "build_random_text_model", "sharpen_margins", "export_random_text_model", "real_size_draft_config",
           "write_random_draft", "real_size_vision_config", "real_size_image_processor", "random_target_config",
           "write_random_target"]

VERIFY_LENGTH = 16  # a block of the published draft: 15 drafts + the anchor
HIDDEN_LAYER_IDS = [3, 7, 11, 15, 19]
DRAFT_VOCAB_SIZE = 114_688
EMBEDDINGS_FILE = "embed_tokens.npy"  # the exported text model's input embeddings: the benchmarks embed by reading rows
DRAFT_LAYERS = 5
MARKOV_RANK = 256  # DeepSpec config/dspark/*.py
DRAFT_EOS_TOKEN_ID = 0  # only needs to be in the sampled draft vocabulary; the benchmarks never stop at EOS
# Copied from the tokenizer folder as they are; processor_config.json is copied with the page-sizing fields replaced.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
PROCESSOR_FILE = "processor_config.json"


def real_size_text_config():
    """A Qwen3_5TextConfig with MiniCPM-OCR 1.0's text-model sizes (layer types: every 4th full attention)."""
    from transformers import Qwen3_5TextConfig

    layers = 24
    return Qwen3_5TextConfig(
        vocab_size=248_320, hidden_size=1024, intermediate_size=3584, num_hidden_layers=layers,
        num_attention_heads=8, num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
        linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [11, 11, 10]},
        tie_word_embeddings=True,
    )


def build_random_text_model(*, seed: int = 0):
    """The randomly initialised real-size Qwen3.5 text model (fp32, eval mode; ~3 GB)."""
    import torch
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(seed)
    return Qwen3_5ForCausalLM(real_size_text_config()).eval()


def sharpen_margins(model, *, input_scale: float, seed: int = 0) -> np.ndarray:
    """Gives a random Qwen3.5 causal LM a trained model's wide top-1/top-2 logit margins, in place: a bigram reader.

    A random model's last hidden state points at no row of the output embedding in particular, so its top two
    logits are near-ties (`benchmarks.margins` measures them), and bf16 rounding flips them. Scaling the final
    norm or the output embedding would not help: it scales the margins and the rounding errors alike. Here the
    input embeddings are multiplied by `input_scale`, so the token read dominates the residual stream up to the
    last layer (every layer reads an RMS-normalised copy, so what the layers add keeps its size), and the output
    embedding is untied and set to the input rows under a fixed random permutation pi (row pi(v) = row v). The
    next token is then pi(current token) by a margin that grows with `input_scale`, as a confident reader's is;
    the rest of the context still moves every logit. The shapes, so the costs, are the random model's.

    Args:
        model: a `Qwen3_5ForCausalLM` (`build_random_text_model`).
        input_scale: factor of the input embeddings; 1 keeps the random model's margins (but unties it).
        seed: numpy seed of the permutation.

    Returns:
        pi, as an array: pi[v] is the token the model favours after token v.
    """
    import torch

    if input_scale <= 0:
        raise ValueError(f"input_scale={input_scale} must be positive")
    embeddings = model.get_input_embeddings().weight.detach().clone()
    permutation = torch.from_numpy(np.random.default_rng(seed).permutation(embeddings.shape[0]))
    output = torch.empty_like(embeddings)
    output[permutation] = embeddings
    model.config.tie_word_embeddings = False
    model.get_input_embeddings().weight = torch.nn.Parameter(embeddings * input_scale, requires_grad=False)
    model.get_output_embeddings().weight = torch.nn.Parameter(output, requires_grad=False)
    return permutation.numpy()


def export_random_text_model(folder: Path, *, weight_format: str, prefill_chunk: int,
                             input_scale: float | None = None, chunk_size: int | None = None) -> dict:
    """Exports the random real-size text model's IR into the existing `folder`, with its input embeddings.

    Args:
        folder: an existing, empty folder (the caller makes it atomic or temporary).
        weight_format: the IR's weights (`utils.export.language_model.WEIGHT_FORMATS`).
        prefill_chunk: the most tokens of a prefill call.
        input_scale: gives the model trained-like margins (`sharpen_margins`); None keeps the random ones.
        chunk_size: tokens per chunk of the gated delta rule inside the graph (None: the exporter's default).
            Tracing unrolls one slot per chunk of the longest call, so a long call needs larger chunks to fit
            in memory.

    Returns:
        The exporter's report (`export_language_model`).
    """
    import gc

    from utils.export.language_model import export_language_model

    model = build_random_text_model(seed=0)
    if input_scale is not None:
        sharpen_margins(model, input_scale=input_scale)
    print(f"random Qwen3.5 text model: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters; "
          f"exporting ({weight_format}, calls of up to {prefill_chunk} tokens) ...", flush=True)
    np.save(folder / EMBEDDINGS_FILE, model.get_input_embeddings().weight.detach().numpy())
    chunking = {} if chunk_size is None else {"chunk_size": chunk_size}
    report = export_language_model(model, folder, hidden_layer_ids=HIDDEN_LAYER_IDS, verify_length=VERIFY_LENGTH,
                                   prefill_chunk=prefill_chunk, weight_format=weight_format, **chunking)
    print(f"  exported in {report['export_seconds']:.0f} s", flush=True)
    del model
    gc.collect()
    return report


def real_size_draft_config(text_config, *, block_size: int, mask_token_id: int) -> dict:
    """The draft's `config.json` (published layout, `dflash_config` nested), sized from the target's text config."""
    return {
        "architectures": ["Qwen3DSparkModel"],
        "model_type": "qwen3",
        "hidden_size": text_config.hidden_size,
        "intermediate_size": text_config.intermediate_size,
        "num_hidden_layers": DRAFT_LAYERS,
        "num_attention_heads": text_config.num_attention_heads,
        "num_key_value_heads": text_config.num_key_value_heads,
        "head_dim": text_config.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": text_config.rope_parameters["rope_theta"],
        "max_position_embeddings": 40_960,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "vocab_size": text_config.vocab_size,
        "draft_vocab_size": DRAFT_VOCAB_SIZE,
        "num_target_layers": text_config.num_hidden_layers,
        "block_size": block_size,
        "eos_token_id": DRAFT_EOS_TOKEN_ID,
        "dflash_config": {
            "target_layer_ids": HIDDEN_LAYER_IDS,
            "mask_token_id": mask_token_id,
            "markov_rank": MARKOV_RANK,
            "markov_head_type": "vanilla",
            "enable_confidence_head": True,
            "confidence_head_with_markov": True,
        },
    }


def write_random_draft(folder: Path, config: dict, *, seed: int = 0, std: float = 0.02) -> int:
    """Writes config.json, model.safetensors and local-to-target.json of a random draft into an existing folder.

    Returns:
        The number of parameters (`d2t` excluded, as the model card counts).
    """
    from safetensors.numpy import save_file

    from utils.checkpoint.config import DSparkConfig
    from utils.checkpoint.draft import DRAFT_WEIGHTS, LOCAL_TO_TARGET, draft_tensor_shapes
    from utils.tiny.draft import random_draft_weights, sample_draft_vocabulary

    rng = np.random.default_rng(seed)
    draft_vocab_size = config["draft_vocab_size"]
    target_ids = sample_draft_vocabulary(rng, vocab_size=config["vocab_size"], draft_vocab_size=draft_vocab_size,
                                         eos_token_id=DRAFT_EOS_TOKEN_ID)
    tensors = random_draft_weights(draft_tensor_shapes(DSparkConfig.from_dict(config)), rng, std)
    parameters = sum(tensor.size for tensor in tensors.values())
    tensors["d2t"] = target_ids - np.arange(draft_vocab_size, dtype=np.int64)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(dict(sorted(tensors.items())), str(folder / DRAFT_WEIGHTS), metadata={"format": "pt"})
    (folder / LOCAL_TO_TARGET).write_text(json.dumps(target_ids.tolist()) + "\n")
    return parameters


def real_size_vision_config():
    """The vision tower's config: the installed transformers' `MiniCPMOcrVisionConfig` defaults (MiniCPM-V 4.6's)."""
    from transformers import MiniCPMOcrVisionConfig

    return MiniCPMOcrVisionConfig()


def real_size_image_processor(vision_config) -> dict:
    """The image-processor fields that size a page's vision input: transformers' `MiniCPMOcrImageProcessor` class
    defaults (scale_resolution 448, up to 9 slices), with the vision tower's patch size (the processor's default, 14,
    disagrees with the vision config's, 16, and the two must match)."""
    from transformers import MiniCPMOcrImageProcessor

    return {"scale_resolution": MiniCPMOcrImageProcessor.scale_resolution,
            "max_slice_nums": MiniCPMOcrImageProcessor.max_slice_nums, "patch_size": vision_config.patch_size}


def random_target_config(text_config, vision_config, *, tokenizer_folder: Path):
    """A `MiniCPMOcrConfig` of the given text and vision sizes, with the special-token ids of `tokenizer_folder`.

    Args:
        text_config: a `Qwen3_5TextConfig` (`real_size_text_config`); its vocabulary must hold the tokenizer's.
        vision_config: a `MiniCPMOcrVisionConfig` (`real_size_vision_config`).
        tokenizer_folder: a MiniCPM-OCR folder whose tokenizer the target borrows (the shipped tiny target).
    """
    from transformers import MiniCPMOcrConfig

    shipped = json.loads((tokenizer_folder / "config.json").read_text())
    if text_config.vocab_size < shipped["text_config"]["vocab_size"]:
        raise ValueError(f"vocab_size={text_config.vocab_size} is smaller than the {tokenizer_folder} tokenizer's "
                         f"{shipped['text_config']['vocab_size']} rows")
    token_ids = {key: shipped["text_config"][key] for key in ("eos_token_id", "pad_token_id")}
    return MiniCPMOcrConfig(text_config=text_config.to_dict() | token_ids, vision_config=vision_config.to_dict(),
                            insert_layer_id=vision_config.insert_layer_id, image_token_id=shipped["image_token_id"],
                            video_token_id=shipped["video_token_id"])


def write_random_target(folder: Path, config, *, tokenizer_folder: Path, image_processor: dict, seed: int = 0
                        ) -> dict[str, int]:
    """Writes a random `MiniCPMOcrForConditionalGeneration` folder that `utils.export.target.export_target` reads.

    The weights are initialised and saved in bf16: half the memory and disk of fp32 (the exporter loads them in
    fp32 either way). Tokenizer, chat template and generation config are `tokenizer_folder`'s; so is
    processor_config.json, with `image_processor`'s fields replaced in its image and video sections.

    Args:
        folder: an existing, empty folder.
        config: a `MiniCPMOcrConfig` (`random_target_config`).
        tokenizer_folder: the folder whose tokenizer and processor files are copied.
        image_processor: processor fields to replace (`real_size_image_processor`).
        seed: torch seed of the initialisation.

    Returns:
        Parameters per part: "text" (the language model, tied embedding counted once) and "vision" (tower + merger).
    """
    import torch
    from transformers import MiniCPMOcrForConditionalGeneration

    torch.manual_seed(seed)
    model = MiniCPMOcrForConditionalGeneration._from_config(config, dtype=torch.bfloat16).eval()
    total = sum(parameter.numel() for parameter in model.parameters())
    text = sum(parameter.numel() for parameter in model.get_decoder().parameters())
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy2(tokenizer_folder / name, folder / name)
    processor = json.loads((tokenizer_folder / PROCESSOR_FILE).read_text())
    for section in ("image_processor", "video_processor"):
        processor[section] |= image_processor
    (folder / PROCESSOR_FILE).write_text(json.dumps(processor, indent=2) + "\n")
    return {"text": text, "vision": total - text}
