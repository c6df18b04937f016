"""The tiny pair rewritten in the layout the real checkpoints publish, field by field as far as public sources show it.

`openbmb/MiniCPM-OCR-1.0` and `openbmb/MiniCPM-OCR-1.0-DSpark` cannot be downloaded here, so this variant is how
the suite checks that its loaders read their files. What public sources say about them (transformers' `minicpm_ocr`
code and its MiniCPM-V 4.6 origin, the draft's model card, vLLM's and DeepSpec's DSpark loaders) and what the
variant therefore writes:

target:
- `config.json`: `eos_token_id` only at the top level (MiniCPM-V 4.6 keeps 248044 there; `text_config` and
  `generation_config.json` carry none), `image_token_id` at the top level, `dtype` bfloat16, a text vocabulary
  padded beyond the tokenizer's (248,320 rows for about 248,100 tokens), `downsample_mode` "16x";
- `model.safetensors` in bf16;
- `tokenizer_config.json`: the multimodal tokens only inside an `extra_special_tokens` dict;
- `chat_template.jinja` (not inside `tokenizer_config.json`) with the Qwen3.5 `enable_thinking` switch, which
  defaults to thinking; the serving recipe renders it with `enable_thinking: false`;
- `processor_config.json`: `small_image_upsize` "adaptive" (the calibration the checkpoint was trained with),
  `downsample_mode` "16x".
draft:
- `config.json`: Qwen3 fields plus DSpark fields, some flat, some only under `dflash_config`, some in both (equal);
  an explicit `head_dim`; no confidence-head flags (they follow from the tensors); `dtype` bfloat16; an input
  vocabulary (`vocab_size`) smaller than the target's padded embedding rows;
- `model.safetensors` in bf16 with the tensors real loaders skip (`t2d`, `mask_embedding`);
- `local-to-target.json` and `export-audit.json` as shipped.

The weights are the shipped pair's, rounded to bf16: the pair keeps working as a pair (the target verifies every
token), only the numbers differ. Exporting reads bf16 into float32 exactly, so the f32 invariant still holds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from utils.files import atomic_directory
from utils.tiny.pair import TinyPair, default_pair

__all__ = ["PUBLISHED_CHAT_TEMPLATE", "write_published_layout"]

# The shape of Qwen3.5-family templates: the answer opens with an empty think block only when thinking is off.
PUBLISHED_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<|image_pad|>{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}"
)
_MULTIMODAL_TOKEN_FIELDS = ("image_token", "image_start_token", "image_end_token", "slice_start_token",
                            "slice_end_token", "image_id_start_token", "image_id_end_token", "video_token")
_DRAFT_FIELDS_FLAT_ONLY = ("block_size",)
_DRAFT_FIELDS_IN_BOTH = ("target_layer_ids", "mask_token_id")
_CONFIDENCE_FLAGS = ("enable_confidence_head", "confidence_head_with_markov")
_END_OF_TEXT = "<|endoftext|>"  # what MiniCPM-V 4.6's top-level eos_token_id names; <|im_end|> ends a chat turn


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _write(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _save_bf16(source: Path, out: Path, extra: dict | None = None) -> None:
    """Rewrites a safetensors file with every float tensor in bf16, plus `extra` tensors."""
    import torch
    from safetensors.torch import load_file, save_file

    tensors = {name: tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor
               for name, tensor in load_file(source).items()}
    save_file(tensors | (extra or {}), out, metadata={"format": "pt"})


def _token_id(tokenizer_file: Path, content: str) -> int:
    added = _read(tokenizer_file).get("added_tokens", [])
    return next(token["id"] for token in added if token["content"] == content)


def _publish_target(source: Path, out: Path) -> None:
    shutil.copy2(source / "tokenizer.json", out / "tokenizer.json")
    _save_bf16(source / "model.safetensors", out / "model.safetensors")

    config = _read(source / "config.json")
    config["text_config"].pop("eos_token_id", None)
    config |= {"eos_token_id": _token_id(source / "tokenizer.json", _END_OF_TEXT), "dtype": "bfloat16",
               "downsample_mode": "16x"}
    config["text_config"]["dtype"] = config["vision_config"]["dtype"] = "bfloat16"
    _write(out / "config.json", config)

    generation = _read(source / "generation_config.json")
    generation.pop("eos_token_id", None)
    _write(out / "generation_config.json", generation)

    tokenizer_config = _read(source / "tokenizer_config.json")
    extra = {name: tokenizer_config.pop(name) for name in _MULTIMODAL_TOKEN_FIELDS if name in tokenizer_config}
    tokenizer_config["extra_special_tokens"] = extra
    _write(out / "tokenizer_config.json", tokenizer_config)
    (out / "chat_template.jinja").write_text(PUBLISHED_CHAT_TEMPLATE, encoding="utf-8")

    processor = _read(source / "processor_config.json")
    for section in ("image_processor", "video_processor"):
        processor[section]["downsample_mode"] = "16x"
    processor["image_processor"]["small_image_upsize"] = "adaptive"
    _write(out / "processor_config.json", processor)


def _publish_draft(source: Path, out: Path) -> None:
    import torch

    for name in ("local-to-target.json", "export-audit.json"):
        shutil.copy2(source / name, out / name)
    config = _read(source / "config.json")
    nested = config["dflash_config"]
    for name in _DRAFT_FIELDS_FLAT_ONLY:
        config[name] = nested.pop(name, config.get(name))
    for name in _DRAFT_FIELDS_IN_BOTH:
        config[name] = nested[name]
    for name in _CONFIDENCE_FLAGS:
        config.pop(name, None)
        nested.pop(name, None)
    config.pop("torch_dtype", None)
    config["dtype"] = "bfloat16"
    _write(out / "config.json", config)
    skipped = {"t2d": torch.zeros(config["vocab_size"], dtype=torch.bool),
               "mask_embedding": torch.zeros(1, config["hidden_size"], dtype=torch.bfloat16)}
    _save_bf16(source / "model.safetensors", out / "model.safetensors", extra=skipped)


def write_published_layout(out: Path | str, pair: TinyPair | None = None, *, overwrite: bool = False) -> TinyPair:
    """Writes `pair` (default: the shipped pair) into `out/target` and `out/draft` in the published layout.

    Args:
        out: the folder to create, written atomically.
        pair: the tiny pair to rewrite.
        overwrite: replace an existing `out`.

    Returns:
        The rewritten pair (its config and training are the source pair's).
    """
    pair = pair or default_pair()
    out = Path(out)
    with atomic_directory(out, overwrite=overwrite) as staging:
        for role, publish in (("target", _publish_target), ("draft", _publish_draft)):
            (staging / role).mkdir()
            publish(getattr(pair, role), staging / role)
    return TinyPair(out, pair.config, pretrain=pair.pretrain, distill=pair.distill)
