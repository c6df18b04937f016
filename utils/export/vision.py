"""Vision tower + merger and the text embedding table of MiniCPM-OCR -> OpenVINO IR.

Why one slice size per inference: transformers runs attention separately per tile (`cu_seqlens`) and merges
each tile in a Python loop over `target_sizes`; a traced graph freezes both. One graph over the whole packed
sequence would need a block-diagonal attention mask, quadratic in all patches of all tiles (for the real model,
10 tiles of 32 x 32 patches and 16 heads: about 6.7 GB in fp32). So the vision IR takes a batch of tiles that
share one patch grid (the slices of an image always do) with the height, width and batch dynamic, and
the runtime's `VisionEncoder` feeds it the overview and the slices of a `PreprocessedImage` in order.

Vision IR `VISION_EMBEDDINGS_NAME`:
    pixel_values  f32 [B, 3, p, h * w * p]  B tiles of h x w patches, NaViT-packed (`reshape_by_patch`)
    target_sizes  i32 [1, 2]                (h, w), the same for every tile of the batch
    image_features f32 [B * h * w / 4, H]   the rows the tiles' image tokens receive, tile by tile ("4x" mode)
Text IR `TEXT_EMBEDDINGS_NAME`:
    input_ids      i64 [batch, S]  ->  inputs_embeds f32 [batch, S, H]
"""

from __future__ import annotations

from pathlib import Path

import torch

from utils.contract import (IMAGE_FEATURES, INPUT_IDS, INPUTS_EMBEDS, PIXEL_VALUES, TARGET_SIZES, TEXT_EMBEDDINGS_NAME,
                            VISION_EMBEDDINGS_NAME)

__all__ = ["VisionEmbeddingsWrapper", "export_vision_embeddings", "export_text_embeddings"]


def _merge_windows(features: torch.Tensor, height: torch.Tensor, width: torch.Tensor,
                   kernel: tuple[int, int]) -> torch.Tensor:
    """[B, h * w, D] in row-major patch order -> [B * h/kh * w/kw, kh * kw * D], windows in row-major order."""
    batch, _, dim = features.shape
    kernel_h, kernel_w = kernel
    windows = features.reshape(batch, height // kernel_h, kernel_h, width // kernel_w, kernel_w, dim)
    return windows.permute(0, 1, 3, 2, 4, 5).reshape(-1, kernel_h * kernel_w * dim)


class VisionEmbeddingsWrapper(torch.nn.Module):
    """`MiniCPMOcrModel.get_image_features` ("4x" mode) for a batch of same-size tiles, traceable with dynamic sizes.

    Reuses the HF submodules (patch and position embeddings, encoder layer norms and MLPs, merger MLPs) and
    re-states only what transformers does with Python integers: bucketed position ids, per-tile attention
    (here one tile per batch row, through `scaled_dot_product_attention`) and the 2 x 2 window merge.
    """

    def __init__(self, model) -> None:
        super().__init__()
        config = model.config
        if config.downsample_mode != "4x":
            raise ValueError(f"config.json: downsample_mode {config.downsample_mode!r} is not supported by the "
                             "vision export (only '4x', which skips the ViT window merger)")
        self.vision_tower = model.model.vision_tower
        self.merger = model.model.merger
        side = self.vision_tower.embeddings.num_patches_per_side
        self.num_patches_per_side = side
        self.register_buffer("boundaries", torch.arange(1 / side, 1.0, 1 / side), persistent=False)

    def _position_ids(self, height: torch.Tensor, width: torch.Tensor) -> torch.Tensor:
        """Nearest-bucket ids into the learned side x side position table, as `get_vision_nearest_position_ids`."""
        rows = torch.bucketize(torch.arange(height) / height, self.boundaries, right=True)
        cols = torch.bucketize(torch.arange(width) / width, self.boundaries, right=True)
        return (rows[:, None] * self.num_patches_per_side + cols[None, :]).flatten()

    def _attention(self, attention, hidden: torch.Tensor) -> torch.Tensor:
        batch, length, dim = hidden.shape
        split = (batch, length, attention.num_heads, attention.head_dim)
        query, key, value = (projection(hidden).view(split).transpose(1, 2)
                             for projection in (attention.q_proj, attention.k_proj, attention.v_proj))
        output = torch.nn.functional.scaled_dot_product_attention(query, key, value, scale=attention.scaling)
        return attention.out_proj(output.transpose(1, 2).reshape(batch, length, dim))

    def forward(self, pixel_values: torch.Tensor, target_sizes: torch.Tensor) -> torch.Tensor:
        height, width = target_sizes[0, 0].long(), target_sizes[0, 1].long()
        embeddings = self.vision_tower.embeddings
        hidden = embeddings.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
        hidden = hidden + embeddings.position_embedding(self._position_ids(height, width))[None]
        for layer in self.vision_tower.encoder.layers:
            hidden = hidden + self._attention(layer.self_attn, layer.layer_norm1(hidden))
            hidden = hidden + layer.mlp(layer.layer_norm2(hidden))
        hidden = self.vision_tower.post_layernorm(hidden)
        kernel = tuple(self.merger.merge_kernel_size)
        for mlp in self.merger.mlp:
            batch = hidden.shape[0]
            hidden = mlp(_merge_windows(hidden, height, width, kernel)).reshape(batch, -1, mlp.linear_2.out_features)
            height, width = height // kernel[0], width // kernel[1]
        return hidden.reshape(-1, hidden.shape[-1])


class _TextEmbeddingsWrapper(torch.nn.Module):
    def __init__(self, model) -> None:
        super().__init__()
        self.embed_tokens = model.get_input_embeddings()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)


def _convert_and_save(module: torch.nn.Module, path: Path, *, example: dict[str, torch.Tensor],
                      shapes: list, names: list[str], output_name: str, compress_to_fp16: bool) -> Path:
    import openvino as ov

    with torch.no_grad():
        ov_model = ov.convert_model(module, example_input=example, input=shapes)
    for port, name in zip(ov_model.inputs, names):
        port.get_tensor().set_names({name})
    ov_model.outputs[0].get_tensor().set_names({output_name})
    path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov_model, path, compress_to_fp16=compress_to_fp16)
    return path


def export_vision_embeddings(model, out: Path | str, *, compress_to_fp16: bool = False) -> Path:
    """Converts the vision tower + merger into `out / VISION_EMBEDDINGS_NAME`.

    Args:
        model: a loaded `MiniCPMOcrForConditionalGeneration` (eval mode).
        out: the export folder.
        compress_to_fp16: store weights in fp16 (half the size; fp32 is the reference).

    Returns:
        The path of the written IR.
    """
    import openvino as ov

    wrapper = VisionEmbeddingsWrapper(model).eval()
    patch = model.config.vision_config.patch_size
    grid = [2 * size for size in model.config.merge_kernel_size]
    example = {PIXEL_VALUES: torch.zeros(2, model.config.vision_config.num_channels, patch, grid[0] * grid[1] * patch),
               TARGET_SIZES: torch.tensor([grid], dtype=torch.int32)}  # the keys name `forward`'s arguments
    shapes = [ov.PartialShape([-1, model.config.vision_config.num_channels, patch, -1]), ov.PartialShape([1, 2])]
    return _convert_and_save(wrapper, Path(out) / VISION_EMBEDDINGS_NAME, example=example, shapes=shapes,
                             names=list(example), output_name=IMAGE_FEATURES, compress_to_fp16=compress_to_fp16)


def export_text_embeddings(model, out: Path | str, *, compress_to_fp16: bool = False) -> Path:
    """Converts the text embedding table into `out / TEXT_EMBEDDINGS_NAME` (input_ids -> inputs_embeds).

    Args:
        model: a loaded `MiniCPMOcrForConditionalGeneration`.
        out: the export folder.
        compress_to_fp16: store the table in fp16.

    Returns:
        The path of the written IR.
    """
    import openvino as ov

    example = {INPUT_IDS: torch.zeros(1, 3, dtype=torch.int64)}
    return _convert_and_save(_TextEmbeddingsWrapper(model).eval(), Path(out) / TEXT_EMBEDDINGS_NAME,
                             example=example, shapes=[ov.PartialShape([-1, -1])], names=[INPUT_IDS],
                             output_name=INPUTS_EMBEDS, compress_to_fp16=compress_to_fp16)
