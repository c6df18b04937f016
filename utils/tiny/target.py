"""The tiny MiniCPM-OCR target: same classes and hybrid text layers as the real model, random weights."""

from __future__ import annotations

import contextlib
from pathlib import Path

__all__ = ["build_tiny_target", "quiet_progress_bars"]


def _text_config(spec, tokenizer) -> dict:
    interval = spec.full_attention_interval
    layer_types = [
        "full_attention" if (index + 1) % interval == 0 else "linear_attention"
        for index in range(spec.num_hidden_layers)
    ]
    return {
        "model_type": "qwen3_5_text",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": 2 * spec.hidden_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": spec.hidden_size // 4,
        "max_position_embeddings": 8192,
        "rope_parameters": {"rope_type": "default", "rope_theta": spec.rope_theta,
                            "partial_rotary_factor": spec.partial_rotary_factor,
                            "mrope_section": _mrope_section(spec.hidden_size // 4 * spec.partial_rotary_factor)},
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "layer_types": layer_types,
        "initializer_range": spec.initializer_range,
        "tie_word_embeddings": True,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def _mrope_section(rotary_dims: float) -> list[int]:
    """The rotary frequencies split over the (time, height, width) axes as the real config splits them (2:1:1,
    [11, 11, 10] of 32 there); text positions are 1-D, so the three coincide on text and the split only keeps the
    config well-formed."""
    frequencies = int(rotary_dims) // 2
    return [frequencies - 2 * (frequencies // 4), frequencies // 4, frequencies // 4]


def _vision_config(spec) -> dict:
    return {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "patch_size": spec.patch_size,
        "initializer_range": spec.initializer_range,
    }


def build_tiny_target(spec, tokenizer, out: Path) -> None:
    """Writes a random `MiniCPMOcrForConditionalGeneration`, its processor and tokenizer into `out`.

    Args:
        spec: a `TinyPairConfig` (sizes, seed, initialisation).
        tokenizer: the trained tokenizer (`train_tokenizer`).
        out: an empty folder.
    """
    import torch
    from transformers import (GenerationConfig, MiniCPMOcrConfig, MiniCPMOcrForConditionalGeneration,
                              MiniCPMOcrImageProcessor, MiniCPMOcrProcessor, MiniCPMOcrVideoProcessor)

    config = MiniCPMOcrConfig(
        text_config=_text_config(spec, tokenizer),
        vision_config=_vision_config(spec),
        image_token_id=tokenizer.image_token_id,
        video_token_id=tokenizer.video_token_id,
        insert_layer_id=0,
        initializer_range=spec.initializer_range,
    )
    torch.manual_seed(spec.seed)
    model = MiniCPMOcrForConditionalGeneration(config).eval()
    _shape_output_rows(model, eos_token_id=tokenizer.eos_token_id, eos_scale=spec.eos_scale,
                       tokenizer_size=len(tokenizer))

    resolution = spec.scale_resolution
    processor = MiniCPMOcrProcessor(
        image_processor=MiniCPMOcrImageProcessor(scale_resolution=resolution, max_slice_nums=spec.max_slice_nums,
                                                 patch_size=spec.patch_size,
                                                 small_image_upsize=spec.small_image_upsize),
        video_processor=MiniCPMOcrVideoProcessor(scale_resolution=resolution, max_slice_nums=1,
                                                 patch_size=spec.patch_size),
        tokenizer=tokenizer,
    )
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    with quiet_progress_bars():
        model.save_pretrained(out)
    processor.save_pretrained(out)


@contextlib.contextmanager
def quiet_progress_bars():
    """Hides transformers' progress bars ('Writing model shards', 'Loading weights'): the build reports its own."""
    from transformers.utils import logging

    enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            logging.enable_progress_bar()


def _shape_output_rows(model, *, eos_token_id: int, eos_scale: float, tokenizer_size: int) -> None:
    """Makes the random model's greedy answers behave like a real OCR model's, through its tied embedding.

    - The EOS row is scaled by `eos_scale`: a random model almost never picks EOS, while a real one stops when
      the page is read. The scaled row raises the EOS logit where it is already positive, so some answers end
      early and others run to `max_new_tokens`, which is what the tests of EOS handling need.
    - The padding rows beyond the tokenizer (the embedding is rounded up, as the real model's 248,320 rows for
      248,100 tokens) are zeroed, so their logit is 0 and the model does not emit ids that no tokenizer knows.
    """
    import torch

    with torch.no_grad():
        table = model.get_input_embeddings().weight
        table[eos_token_id] *= eos_scale
        table[tokenizer_size:] = 0.0
