"""Vision tower + merger and the text embedding table of MiniCPM-OCR -> OpenVINO IR.

Why one slice size per inference: transformers runs attention separately per tile (`cu_seqlens`) and merges
each tile in a Python loop over `target_sizes`; a traced graph freezes both. One graph over the whole packed
sequence would need a block-diagonal attention mask, quadratic in all patches of all tiles (for the real model,
10 tiles of 32 x 32 patches and 16 heads: about 6.7 GB in fp32). So the vision IR takes a batch of tiles that
share one patch grid (the slices of an image always do) with the height, width and batch dynamic, and
the runtime's `VisionEncoder` feeds it the overview and the slices of a `PreprocessedImage` in order.

`downsample_mode` (config.json's, or the one `export_target` chose: `utils.export.processor_settings`) decides
the image tokens: "4x" merges 2 x 2 patches into one token (the merger
MLP alone); "16x" first merges 2 x 2 patches inside the encoder, after layer `insert_layer_id` (the ViT window
merger: attention within each 2 x 2 window, then an MLP over the window), so the later layers and the merger MLP
see a quarter of the patches and one token covers 4 x 4 patches. The mode is recorded in the IR's rt_info
(`DOWNSAMPLE_MODE_RT_INFO_KEY`) for the runtime to check against the image preprocessing.

Vision IR `VISION_EMBEDDINGS_NAME`:
    pixel_values  f32 [B, 3, p, h * w * p]  B tiles of h x w patches, NaViT-packed (`reshape_by_patch`)
    target_sizes  i32 [1, 2]                (h, w), the same for every tile of the batch
    image_features f32 [B * h * w / m, H]   the rows the tiles' image tokens receive, tile by tile; m = 4 ("4x")
                                            or 16 ("16x") patches per token
Text IR `TEXT_EMBEDDINGS_NAME`:
    input_ids      i64 [batch, S]  ->  inputs_embeds f32 [batch, S, H]
"""

from __future__ import annotations

import warnings

import torch

from utils.contract import (DOWNSAMPLE_MODE_RT_INFO_KEY, IMAGE_FEATURES, INPUT_IDS, INPUTS_EMBEDS, PIXEL_VALUES,
                            TARGET_SIZES)

__all__ = ["VisionEmbeddingsWrapper", "convert_vision_embeddings", "convert_text_embeddings"]


def _merge_windows(features: torch.Tensor, height: torch.Tensor, width: torch.Tensor,
                   kernel: tuple[int, int]) -> torch.Tensor:
    """[B, h * w, D] in row-major patch order -> [B * h/kh * w/kw, kh * kw * D], windows in row-major order."""
    batch, _, dim = features.shape
    kernel_h, kernel_w = kernel
    windows = features.reshape(batch, height // kernel_h, kernel_h, width // kernel_w, kernel_w, dim)
    return windows.permute(0, 1, 3, 2, 4, 5).reshape(-1, kernel_h * kernel_w * dim)


def _insert_layer_id(downsample_mode: str, vision_config) -> int | None:
    """The encoder layer after which "16x" merges 2 x 2 patches (None for "4x"), validated."""
    if downsample_mode == "4x":
        return None
    if downsample_mode != "16x":
        raise ValueError(f"config.json: downsample_mode {downsample_mode!r} is not supported by the vision "
                         "export (supported: '4x', '16x')")
    layer_id, num_layers = vision_config.insert_layer_id, vision_config.num_hidden_layers
    if not 0 <= layer_id < num_layers:
        raise ValueError(f"config.json: insert_layer_id={layer_id} must be a vision encoder layer in [0, "
                         f"{num_layers - 1}] for downsample_mode '16x' (the ViT merger runs after that layer)")
    return layer_id


class VisionEmbeddingsWrapper(torch.nn.Module):
    """`MiniCPMOcrModel.get_image_features` for a batch of same-size tiles, traceable with dynamic sizes.

    Reuses the HF submodules (patch and position embeddings, encoder layer norms and MLPs, ViT window merger,
    merger MLPs) and re-states only what transformers does with Python integers: bucketed position ids, per-tile
    attention (here one tile per batch row, through `scaled_dot_product_attention`), the window attention of the
    "16x" insert merger (one 2 x 2 window per batch row) and the window merges.
    """

    def __init__(self, model, downsample_mode: str | None = None) -> None:
        super().__init__()
        self.downsample_mode = downsample_mode or model.config.downsample_mode
        self.vision_tower = model.model.vision_tower
        self.insert_layer_id = _insert_layer_id(self.downsample_mode, self.vision_tower.config)
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

    def _window_merge(self, hidden: torch.Tensor, height: torch.Tensor, width: torch.Tensor) -> torch.Tensor:
        """The ViT window merger ("16x"): [B, h * w, D] -> [B, h/kh * w/kw, D], windows in row-major order.

        Attention runs within each window (its own batch row), as transformers' `cu_seqlens` over windows does.
        """
        merger = self.vision_tower.vit_merger
        kernel = merger.window_kernel_size
        batch, _, dim = hidden.shape
        windows = _merge_windows(hidden, height, width, kernel).reshape(-1, kernel[0] * kernel[1], dim)
        windows = windows + self._attention(merger.self_attn, merger.layer_norm1(windows))
        merged = merger.linear_2(merger.act(merger.linear_1(merger.pre_norm(windows.flatten(1)))))
        return (merged + windows.mean(dim=1)).reshape(batch, -1, dim)

    def forward(self, pixel_values: torch.Tensor, target_sizes: torch.Tensor) -> torch.Tensor:
        height, width = target_sizes[0, 0].long(), target_sizes[0, 1].long()
        embeddings = self.vision_tower.embeddings
        hidden = embeddings.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
        hidden = hidden + embeddings.position_embedding(self._position_ids(height, width))[None]
        for index, layer in enumerate(self.vision_tower.encoder.layers):
            hidden = hidden + self._attention(layer.self_attn, layer.layer_norm1(hidden))
            hidden = hidden + layer.mlp(layer.layer_norm2(hidden))
            if index == self.insert_layer_id:
                hidden = self._window_merge(hidden, height, width)
                kernel = self.vision_tower.vit_merger.window_kernel_size
                height, width = height // kernel[0], width // kernel[1]
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


def _convert(module: torch.nn.Module, *, example: dict[str, torch.Tensor], shapes: list, names: list[str],
             output_name: str, rt_info: dict[str, str] | None = None):
    import openvino as ov

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.trace is what ov.convert_model uses
        ov_model = ov.convert_model(module, example_input=example, input=shapes)
    for port, name in zip(ov_model.inputs, names):
        port.get_tensor().set_names({name})
    ov_model.outputs[0].get_tensor().set_names({output_name})
    for key, value in (rt_info or {}).items():
        ov_model.set_rt_info(value, key)
    return ov_model


def convert_vision_embeddings(model, downsample_mode: str | None = None):
    """The vision tower + merger as an `ov.Model` (the vision IR, not yet saved).

    Args:
        model: a loaded `MiniCPMOcrForConditionalGeneration` (eval mode).
        downsample_mode: "4x" (the window merger is skipped, as transformers does in that mode) or "16x"; None:
            config.json's.
    """
    import openvino as ov

    wrapper = VisionEmbeddingsWrapper(model, downsample_mode).eval()
    patch = model.config.vision_config.patch_size
    window = (1, 1) if wrapper.insert_layer_id is None else wrapper.vision_tower.vit_merger.window_kernel_size
    grid = [2 * size * step for size, step in zip(model.config.merge_kernel_size, window)]  # 2 tokens per side
    example = {PIXEL_VALUES: torch.zeros(2, model.config.vision_config.num_channels, patch, grid[0] * grid[1] * patch),
               TARGET_SIZES: torch.tensor([grid], dtype=torch.int32)}  # the keys name `forward`'s arguments
    shapes = [ov.PartialShape([-1, model.config.vision_config.num_channels, patch, -1]), ov.PartialShape([1, 2])]
    return _convert(wrapper, example=example, shapes=shapes, names=list(example), output_name=IMAGE_FEATURES,
                    rt_info={DOWNSAMPLE_MODE_RT_INFO_KEY: wrapper.downsample_mode})


def convert_text_embeddings(model):
    """The text embedding table as an `ov.Model` (input_ids -> inputs_embeds; the text IR, not yet saved).

    Args:
        model: a loaded `MiniCPMOcrForConditionalGeneration`.
    """
    import openvino as ov

    example = {INPUT_IDS: torch.zeros(1, 3, dtype=torch.int64)}
    return _convert(_TextEmbeddingsWrapper(model).eval(), example=example, shapes=[ov.PartialShape([-1, -1])],
                    names=[INPUT_IDS], output_name=INPUTS_EMBEDS)
