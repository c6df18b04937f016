"""The exported vision and text-embedding IRs on OpenVINO Runtime, with numpy in and out (no torch).

The vision IR takes one run of same-size tiles per inference (see `utils.export.vision` for why). It computes the
`downsample_mode` recorded in its rt_info, which decides the image tokens per tile; given the preprocessing's
settings, `VisionEncoder` refuses at load an IR that would not return one feature per image token.

Shape symbols:
    p: patch size; N: tiles of one image; L: packed length, sum of h_i * w_i * p; T: image tokens; H: hidden size
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov

from utils.contract import (DOWNSAMPLE_MODE_RT_INFO_KEY, INPUT_IDS, PIXEL_VALUES, TARGET_SIZES, TEXT_EMBEDDINGS_NAME,
                            VISION_EMBEDDINGS_NAME)
from utils.contract.core import openvino_core
from utils.engine.timing import Clock
from utils.contract.processor import ImageProcessorConfig

__all__ = ["VisionEncoder", "TextEmbeddings", "split_tiles"]


def _ir_path(folder: Path | str, name: str) -> Path:
    path = Path(folder) / name
    if not path.is_file():
        raise ValueError(f"{path} does not exist; export the target first")
    return path


def _compile(model: ov.Model | Path, *, device: str, properties: dict | None) -> ov.CompiledModel:
    return openvino_core().compile_model(model, device, properties or {})


def _downsample_mode(model: ov.Model) -> str:
    """The vision IR's `downsample_mode`; "4x" for IRs exported before it was recorded (the only mode then)."""
    if not model.has_rt_info(DOWNSAMPLE_MODE_RT_INFO_KEY):
        return "4x"
    return model.get_rt_info(DOWNSAMPLE_MODE_RT_INFO_KEY).astype(str)


def split_tiles(pixel_values: np.ndarray, target_sizes: np.ndarray) -> list[tuple[tuple[int, int], np.ndarray]]:
    """Cuts packed pixels into runs of consecutive same-size tiles, each stacked as a batch.

    Args:
        pixel_values: [1, 3, p, L] NaViT-packed tiles.
        target_sizes: [N, 2] (h, w) of each tile in patches.

    Returns:
        ((h, w), [B, 3, p, h * w * p]) per run, in tile order.
    """
    patch = pixel_values.shape[2]
    lengths = [int(h) * int(w) * patch for h, w in target_sizes]
    if pixel_values.ndim != 4 or pixel_values.shape[0] != 1 or sum(lengths) != pixel_values.shape[-1]:
        raise ValueError(f"pixel_values of shape {pixel_values.shape} do not hold tiles of sizes "
                         f"{target_sizes.tolist()} (expected [1, 3, {patch}, {sum(lengths)}])")
    tiles = np.split(pixel_values[0], np.cumsum(lengths)[:-1], axis=-1)
    runs: list[tuple[tuple[int, int], list[np.ndarray]]] = []
    for size, tile in zip((tuple(int(v) for v in size) for size in target_sizes), tiles):
        if runs and runs[-1][0] == size:
            runs[-1][1].append(tile)
        else:
            runs.append((size, [tile]))
    return [(size, np.stack(batch)) for size, batch in runs]


class VisionEncoder:
    """Image features of a `PreprocessedImage`, as `MiniCPMOcrModel.get_image_features` returns them, concatenated."""

    def __init__(self, folder: Path | str, device: str = "CPU", *, properties: dict | None = None,
                 image_processor: ImageProcessorConfig | None = None) -> None:
        """
        Args:
            folder: the export folder holding `VISION_EMBEDDINGS_NAME`.
            device: an OpenVINO device name.
            properties: compile properties, e.g. {"INFERENCE_PRECISION_HINT": "f32"}.
            image_processor: the settings of the preprocessing that feeds this encoder, whose `downsample_mode`
                must be the IR's.
        """
        path = _ir_path(folder, VISION_EMBEDDINGS_NAME)
        model = openvino_core().read_model(path)
        self.downsample_mode = _downsample_mode(model)
        if image_processor is not None and image_processor.downsample_mode != self.downsample_mode:
            raise ValueError(f"{image_processor.source}: downsample_mode={image_processor.downsample_mode!r}, but "
                             f"{path} was exported with downsample_mode={self.downsample_mode!r} (config.json); "
                             "the two files must agree")
        self.compiled = _compile(model, device=device, properties=properties)
        self.clock = Clock()

    def __call__(self, pixel_values: np.ndarray, target_sizes: np.ndarray) -> np.ndarray:
        """Runs the tiles through the vision IR, one inference per run of same-size tiles.

        Args:
            pixel_values: [1, 3, p, L] float32.
            target_sizes: [N, 2] int.

        Returns:
            [T, H] float32, the rows for the image tokens in prompt order.
        """
        with self.clock.measure():
            features = [
                self.compiled({PIXEL_VALUES: batch.astype(np.float32, copy=False),
                               TARGET_SIZES: np.array([size], dtype=np.int32)})[0]
                for size, batch in split_tiles(pixel_values, np.asarray(target_sizes))
            ]
        return np.concatenate(features, axis=0)


class TextEmbeddings:
    """Rows of the text embedding table for token ids."""

    def __init__(self, folder: Path | str, device: str = "CPU", *, properties: dict | None = None) -> None:
        """
        Args:
            folder: the export folder holding `TEXT_EMBEDDINGS_NAME`.
            device: an OpenVINO device name.
            properties: compile properties.
        """
        self.compiled = _compile(_ir_path(folder, TEXT_EMBEDDINGS_NAME), device=device, properties=properties)
        self.clock = Clock()

    def __call__(self, input_ids: np.ndarray) -> np.ndarray:
        """[batch, S] int -> [batch, S, H] float32."""
        with self.clock.measure():
            return self.compiled({INPUT_IDS: np.asarray(input_ids, dtype=np.int64)})[0]
