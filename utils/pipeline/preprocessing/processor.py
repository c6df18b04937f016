"""Image -> MiniCPM-OCR vision inputs with numpy and PIL: the torch-free twin of `MiniCPMOcrImageProcessor`.

Shape symbols:
    p: patch_size (pixels per patch side)
    N: number of tiles, 1 (the whole image) + rows * cols (slices)
    L: sum over tiles of height * width / p, the packed length

Grids, tile sizes and `target_sizes` equal transformers' exactly. Resizing uses PIL's bicubic filter, which
torchvision's antialiased bicubic (what transformers runs) was written to reproduce, in the same pass order;
the uint8 results differ by at most one level on about 1% of the values (tests/test_preprocessing.py bounds it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from utils.contract.processor import (ImageProcessorConfig, MultimodalTokens, TargetProcessor,
                                      load_image_processor_config, load_multimodal_tokens)

from .glyphs import adaptive_upsize_resolution
from .image_io import MAX_IMAGE_PIXELS, ImageSource, load_rgb_image
from .slicing import find_best_resize, get_refine_size, get_sliced_grid

__all__ = ["PreprocessedImage", "ImagePreprocessor", "reshape_by_patch", "build_image_placeholder"]

_CELL_RESAMPLE = Image.Resampling.BICUBIC  # transformers resizes adaptive slices bicubic, whatever `resample` says


@dataclass(frozen=True)
class PreprocessedImage:
    """Vision inputs and the text placeholder of one image."""

    pixel_values: np.ndarray  # [1, 3, p, L] float32, NaViT-packed tiles: whole image first, then slices
    target_sizes: np.ndarray  # [N, 2] int32, (height, width) of each tile in patches
    grid: tuple[int, int]  # (rows, cols) of slices; (0, 0) when the image is not sliced
    placeholder: str  # image start/end tokens around one image token per feature, slices row by row
    num_image_tokens: int  # image tokens in `placeholder` = rows of the vision features


def reshape_by_patch(tile: np.ndarray, patch_size: int) -> np.ndarray:
    """Packs a [C, H, W] tile into NaViT layout [C, p, H * W / p], patches in row-major order.

    Column `n * p + j` of row `i` holds pixel (i, j) of patch n, so a conv with kernel and stride p over
    the packed tensor yields one embedding per patch.
    """
    channels, height, width = tile.shape
    rows, cols = height // patch_size, width // patch_size
    blocks = tile.reshape(channels, rows, patch_size, cols, patch_size).transpose(0, 2, 1, 3, 4)
    return blocks.reshape(channels, patch_size, rows * cols * patch_size)


def build_image_placeholder(tokens_per_tile: list[int], grid: tuple[int, int], *, tokens: MultimodalTokens) -> str:
    """The text the processor puts where the image goes (without the image id prefix).

    Args:
        tokens_per_tile: image tokens of the whole image, then of each slice in row-major order.
        grid: (rows, cols) of the slices, (0, 0) for none.
        tokens: the multimodal token strings.

    Returns:
        `<image>` + tokens + `</image>`, then one line of `<slice>` + tokens + `</slice>` per grid row.
    """
    overview, *slice_counts = tokens_per_tile
    text = tokens.image_start_token + tokens.image_token * overview + tokens.image_end_token
    rows, cols = grid
    lines = [
        "".join(tokens.slice_start_token + tokens.image_token * count + tokens.slice_end_token
                for count in slice_counts[row * cols:(row + 1) * cols])
        for row in range(rows)
    ]
    return text + "\n".join(lines)


class ImagePreprocessor:
    """Turns an image into `pixel_values`, `target_sizes` and its prompt placeholder, like the HF processor."""

    def __init__(self, config: ImageProcessorConfig, *, tokens: MultimodalTokens,
                 max_pixels: int = MAX_IMAGE_PIXELS) -> None:
        self.config = config
        self.tokens = tokens
        self.max_pixels = max_pixels

    @classmethod
    def from_processor(cls, processor: TargetProcessor, *, max_pixels: int = MAX_IMAGE_PIXELS) -> ImagePreprocessor:
        """The preprocessing of a folder's processor files, read once (`utils.contract.processor`).

        Args:
            processor: the image settings and multimodal tokens of a MiniCPM-OCR folder.
            max_pixels: the largest input image (width x height) accepted.
        """
        return cls(processor.image_processor, tokens=processor.tokens, max_pixels=max_pixels)

    @classmethod
    def from_pretrained(cls, folder: Path | str, *, max_pixels: int = MAX_IMAGE_PIXELS) -> ImagePreprocessor:
        """Reads the settings from a model folder (processor/preprocessor config and tokenizer_config.json).

        Args:
            folder: a MiniCPM-OCR model folder.
            max_pixels: the largest input image (width x height) accepted.
        """
        return cls(load_image_processor_config(folder), tokens=load_multimodal_tokens(folder), max_pixels=max_pixels)

    def __call__(self, image: ImageSource) -> PreprocessedImage:
        """Preprocesses one image.

        Args:
            image: a path, encoded bytes, or a PIL image of any mode.

        Returns:
            The packed pixels, tile sizes and placeholder text.
        """
        rgb = load_rgb_image(image, max_pixels=self.max_pixels)
        tiles, grid = self._tiles(rgb)
        patch = self.config.patch_size
        target_sizes = np.array([[tile.shape[0] // patch, tile.shape[1] // patch] for tile in tiles], dtype=np.int32)
        packed = [reshape_by_patch(self._normalize(tile), patch) for tile in tiles]
        pixel_values = np.concatenate(packed, axis=-1)[None]
        tokens_per_tile = [int(height * width) // self.config.patches_per_token for height, width in target_sizes]
        return PreprocessedImage(
            pixel_values=pixel_values,
            target_sizes=target_sizes,
            grid=grid or (0, 0),
            placeholder=build_image_placeholder(tokens_per_tile, grid or (0, 0), tokens=self.tokens),
            num_image_tokens=sum(tokens_per_tile),
        )

    def _tiles(self, image: Image.Image) -> tuple[list[np.ndarray], tuple[int, int] | None]:
        """The whole image resized, then the slices of the refined image: uint8 [H, W, 3] arrays."""
        config = self.config
        size = (image.height, image.width)
        grid = None
        if config.slice_mode:
            grid = get_sliced_grid(size, max_slice_nums=config.max_slice_nums,
                                   scale_resolution=config.scale_resolution)
        if grid is None:
            return [self._resize(image, self._unsliced_size(image))], None
        overview = self._resize(image, self._best_resize(size, resolution=config.scale_resolution, upscale=False))
        refined = self._resize(image, get_refine_size(size, grid, scale_resolution=config.scale_resolution,
                                                      patch_size=config.patch_size, merge_factor=config.merge_factor))
        rows, cols = grid
        slice_height, slice_width = refined.shape[0] // rows, refined.shape[1] // cols
        slices = [refined[row * slice_height:(row + 1) * slice_height, col * slice_width:(col + 1) * slice_width]
                  for row in range(rows) for col in range(cols)]
        if config.small_image_upsize == "adaptive":
            slices = [self._adaptive_slice(image, grid, divmod(index, cols), tile) for index, tile in enumerate(slices)]
        return [overview, *slices], grid

    def _best_resize(self, size: tuple[int, int], *, resolution: int, upscale: bool) -> tuple[int, int]:
        return find_best_resize(size, scale_resolution=resolution, patch_size=self.config.patch_size,
                                merge_factor=self.config.merge_factor, allow_upscale=upscale)

    def _unsliced_size(self, image: Image.Image) -> tuple[int, int]:
        """The size of an image that is not sliced: upscaled to `scale_resolution` ("always"), kept native
        ("never"), or as the glyph classifier decides ("adaptive")."""
        config = self.config
        size = (image.height, image.width)
        if config.small_image_upsize != "adaptive":
            return self._best_resize(size, resolution=config.scale_resolution,
                                     upscale=config.small_image_upsize == "always")
        resolution = adaptive_upsize_resolution(np.asarray(image), config.scale_resolution)
        return self._best_resize(size, resolution=resolution or config.scale_resolution, upscale=resolution is not None)

    def _adaptive_slice(self, image: Image.Image, grid: tuple[int, int], cell: tuple[int, int],
                        base_tile: np.ndarray) -> np.ndarray:
        """Slice `cell` = (row, col) at the glyph classifier's resolution, cut from the original image, when that
        costs fewer tokens than `base_tile` (the slice of the refined image); else `base_tile`.

        As transformers' `_resolve_tile_size`: the cell's bounds are `round(side * index / count)` of the
        original image, and a cell already of its target size is taken as it is.
        """
        config = self.config
        (rows, cols), (row, col) = grid, cell
        box = (round(image.width * col / cols), round(image.height * row / rows),
               round(image.width * (col + 1) / cols), round(image.height * (row + 1) / rows))
        cell_image = image.crop(box)
        size = (cell_image.height, cell_image.width)
        if min(size) < 1 or size[0] * size[1] > config.scale_resolution ** 2:
            return base_tile
        pixels = np.asarray(cell_image)
        resolution = adaptive_upsize_resolution(pixels, config.scale_resolution)
        if resolution == config.scale_resolution:
            return base_tile
        target = self._best_resize(size, resolution=resolution or config.scale_resolution,
                                   upscale=resolution is not None)
        if target[0] * target[1] >= base_tile.shape[0] * base_tile.shape[1]:
            return base_tile
        if target == size:
            return pixels
        return self._resize(cell_image, target, resample=_CELL_RESAMPLE)

    def _resize(self, image: Image.Image, size: tuple[int, int], *,
                resample: Image.Resampling | None = None) -> np.ndarray:
        """Resizes width first, then height, in two PIL passes: torchvision's order (PIL alone may go height first
        for tall images, which moves up to ~6 uint8 levels on a quarter of the pixels).

        `resample` defaults to the config's filter.
        """
        height, width = size
        resample = Image.Resampling(self.config.resample) if resample is None else resample
        return np.asarray(image.resize((width, image.height), resample=resample).resize((width, height),
                                                                                     resample=resample))

    def _normalize(self, tile: np.ndarray) -> np.ndarray:
        """uint8 [H, W, 3] -> float32 [3, H, W], rescaled and normalised with the fused mean/std of transformers."""
        config = self.config
        pixels = np.ascontiguousarray(tile.transpose(2, 0, 1), dtype=np.float32)
        if config.do_normalize:
            scale = np.float32(1.0 / config.rescale_factor if config.do_rescale else 1.0)
            mean = np.asarray(config.image_mean, dtype=np.float32)[:, None, None] * scale
            std = np.asarray(config.image_std, dtype=np.float32)[:, None, None] * scale
            return (pixels - mean) / std
        if config.do_rescale:
            return pixels * np.float32(config.rescale_factor)
        return pixels
