"""Image-processor settings and multimodal token strings, read from a MiniCPM-OCR model folder.

Every size and token the preprocessing uses comes from these files, so the same code serves the tiny pair and
`openbmb/MiniCPM-OCR-1.0`. A field missing from the file takes the default of transformers'
`MiniCPMOcrImageProcessor`, which is what `AutoProcessor` would use for the same folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ImageProcessorConfig", "MultimodalTokens", "load_image_processor_config", "load_multimodal_tokens",
           "read_json"]

# Class defaults of transformers' `MiniCPMOcrImageProcessor` (used only for fields a config file omits).
_IMAGE_PROCESSOR_DEFAULTS = {
    "max_slice_nums": 9,
    "scale_resolution": 448,
    "patch_size": 14,
    "slice_mode": True,
    "downsample_mode": "4x",
    "use_image_id": True,
    "small_image_upsize": "always",
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "rescale_factor": 1 / 255,
    "do_rescale": True,
    "do_normalize": True,
    "do_resize": True,
    "resample": 3,
}
_PATCHES_PER_TOKEN = {"4x": 4, "16x": 16}  # transformers' `image_token_divisor`
_SUPPORTED_UPSIZE_MODES = ("always", "never", "adaptive")
_TOKEN_FIELDS = ("image_token", "image_start_token", "image_end_token", "slice_start_token", "slice_end_token",
                 "image_id_start_token", "image_id_end_token")


@dataclass(frozen=True)
class ImageProcessorConfig:
    """The `MiniCPMOcrImageProcessor` settings that decide slicing, resizing and normalisation."""

    max_slice_nums: int
    scale_resolution: int
    patch_size: int
    slice_mode: bool
    downsample_mode: str
    use_image_id: bool
    small_image_upsize: str
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    rescale_factor: float
    do_rescale: bool
    do_normalize: bool
    resample: int
    source: Path  # the file the settings were read from, named by errors about them

    @property
    def merge_factor(self) -> int:
        """Side of the patch block merged into one token: 2 for "4x" (the merger MLP), 4 for "16x" (the ViT
        window merger inside the encoder, then the merger MLP); tile sides are multiples of it in patches."""
        return 2 if self.downsample_mode == "4x" else 4

    @property
    def patches_per_token(self) -> int:
        """Vision patches per image token: 4 for "4x", 16 for "16x"."""
        return _PATCHES_PER_TOKEN[self.downsample_mode]

    @property
    def max_tokens_per_tile(self) -> int:
        """The image tokens of the largest tile (the overview or a slice) of a page: a tile's area is at most
        `scale_resolution`², and rounding adds at most one merged-patch step per side.

        A bound for tiles up to about 20:1 (tests/test_preprocessing.py checks pages up to that, in both modes);
        a thinner strip, such as a single text line upscaled with "always", can take more.
        """
        side = self.scale_resolution // self.patch_size + self.merge_factor
        return side * side // self.patches_per_token

    @property
    def max_image_tokens(self) -> int:
        """The image tokens of the largest page: the overview and `max_slice_nums` slices (see
        `max_tokens_per_tile`), whatever `small_image_upsize` says: every mode resizes a tile to at most
        `scale_resolution`² pixels before rounding."""
        return (self.max_slice_nums + 1) * self.max_tokens_per_tile


@dataclass(frozen=True)
class MultimodalTokens:
    """The token strings the processor writes around and into an image placeholder."""

    image_token: str
    image_start_token: str
    image_end_token: str
    slice_start_token: str
    slice_end_token: str
    image_id_start_token: str
    image_id_end_token: str


def read_json(path: Path) -> dict:
    """Reads a JSON object from `path`, with a ValueError naming the file when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def _image_processor_fields(folder: Path) -> tuple[dict, Path]:
    processor_file = folder / "processor_config.json"
    if processor_file.is_file():
        section = read_json(processor_file).get("image_processor")
        if isinstance(section, dict):
            return section, processor_file
    preprocessor_file = folder / "preprocessor_config.json"
    if preprocessor_file.is_file():
        return read_json(preprocessor_file), preprocessor_file
    raise ValueError(f"{folder} has neither processor_config.json with an 'image_processor' section "
                     "nor preprocessor_config.json")


def load_image_processor_config(folder: Path | str) -> ImageProcessorConfig:
    """Reads the image-processor settings of a model folder.

    Args:
        folder: a folder with processor_config.json (section "image_processor") or preprocessor_config.json.

    Returns:
        The settings, validated.
    """
    fields, source = _image_processor_fields(Path(folder))
    values = {**_IMAGE_PROCESSOR_DEFAULTS, **{k: v for k, v in fields.items() if k in _IMAGE_PROCESSOR_DEFAULTS}}
    if values["downsample_mode"] not in _PATCHES_PER_TOKEN:
        raise ValueError(f"{source}: downsample_mode must be one of {sorted(_PATCHES_PER_TOKEN)}, "
                         f"got {values['downsample_mode']!r}")
    if values["small_image_upsize"] not in _SUPPORTED_UPSIZE_MODES:
        raise ValueError(f"{source}: small_image_upsize {values['small_image_upsize']!r} is not supported "
                         f"(supported: {', '.join(_SUPPORTED_UPSIZE_MODES)})")
    if not values.pop("do_resize"):
        raise ValueError(f"{source}: do_resize=false is not supported; MiniCPM-OCR always resizes images")
    for name in ("max_slice_nums", "scale_resolution", "patch_size"):
        if not isinstance(values[name], int) or values[name] < 1:
            raise ValueError(f"{source}: {name} must be a positive integer, got {values[name]!r}")
    for name in ("image_mean", "image_std"):
        if len(values[name]) != 3:
            raise ValueError(f"{source}: {name} must have 3 values (RGB), got {values[name]!r}")
        values[name] = tuple(float(value) for value in values[name])
    return ImageProcessorConfig(**values, source=source)


def load_multimodal_tokens(folder: Path | str) -> MultimodalTokens:
    """Reads the multimodal token strings from the folder's tokenizer_config.json.

    The tokens are top-level fields (as transformers saves them) or entries of an `extra_special_tokens` mapping.

    Args:
        folder: a model folder with tokenizer_config.json.

    Returns:
        The token strings.
    """
    path = Path(folder) / "tokenizer_config.json"
    if not path.is_file():
        raise ValueError(f"{folder} has no tokenizer_config.json to read the image tokens from")
    config = read_json(path)
    extra = config.get("extra_special_tokens")
    extra = extra if isinstance(extra, dict) else {}
    tokens = {}
    for name in _TOKEN_FIELDS:
        value = config.get(name, extra.get(name))
        if isinstance(value, dict):
            value = value.get("content")
        if not isinstance(value, str) or not value:
            raise ValueError(f"{path}: field {name!r} (a token string) is missing")
        tokens[name] = value
    return MultimodalTokens(**tokens)
