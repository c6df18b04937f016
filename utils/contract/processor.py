"""The processor files of a MiniCPM-OCR folder (source or export): image settings, multimodal tokens, chat template.

Every size and token the preprocessing uses comes from these files, so the same code serves the tiny pair and
`openbmb/MiniCPM-OCR-1.0`. A field missing from the file takes the default of transformers'
`MiniCPMOcrImageProcessor`, which is what `AutoProcessor` would use for the same folder.

`read_target_processor` reads them all once into a `TargetProcessor`; the exporter writes the chosen
`downsample_mode` and `max_slice_nums` into the same files (`PROCESSOR_FILES`), so transformers, GenAI and the
runtime read one setting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PROCESSOR_CONFIG", "PREPROCESSOR_CONFIG", "PROCESSOR_FILES", "PROCESSOR_SECTIONS", "DOWNSAMPLE_MODES",
           "ImageProcessorConfig", "MultimodalTokens", "TargetProcessor", "load_image_processor_config",
           "load_multimodal_tokens", "load_chat_template", "read_target_processor", "read_json"]

PROCESSOR_CONFIG = "processor_config.json"  # sections "image_processor" (and "video_processor")
PREPROCESSOR_CONFIG = "preprocessor_config.json"  # the image processor's fields at the top level
PROCESSOR_FILES = (PROCESSOR_CONFIG, PREPROCESSOR_CONFIG)
PROCESSOR_SECTIONS = ("image_processor", "video_processor")  # of PROCESSOR_CONFIG
TOKENIZER_CONFIG = "tokenizer_config.json"  # the multimodal and special token strings, maybe the chat template

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
DOWNSAMPLE_MODES = tuple(_PATCHES_PER_TOKEN)
_SPECIAL_TOKEN_FIELDS = ("bos_token", "eos_token", "pad_token", "unk_token")
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
    processor_file = folder / PROCESSOR_CONFIG
    if processor_file.is_file():
        section = read_json(processor_file).get(PROCESSOR_SECTIONS[0])
        if isinstance(section, dict):
            return section, processor_file
    preprocessor_file = folder / PREPROCESSOR_CONFIG
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


def _tokenizer_config(folder: Path | str) -> tuple[dict, Path]:
    path = Path(folder) / TOKENIZER_CONFIG
    if not path.is_file():
        raise ValueError(f"{folder} has no {TOKENIZER_CONFIG} to read the image tokens from")
    return read_json(path), path


def _multimodal_tokens(config: dict, path: Path) -> MultimodalTokens:
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


def load_multimodal_tokens(folder: Path | str) -> MultimodalTokens:
    """Reads the multimodal token strings from the folder's tokenizer_config.json.

    The tokens are top-level fields (as transformers saves them) or entries of an `extra_special_tokens` mapping.

    Args:
        folder: a model folder with tokenizer_config.json.

    Returns:
        The token strings.
    """
    return _multimodal_tokens(*_tokenizer_config(folder))


def _template_text(value: object, *, source: Path) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {entry.get("name"): entry.get("template") for entry in value if isinstance(entry, dict)}
        if isinstance(named.get("default"), str):
            return named["default"]
    raise ValueError(f"{source}: 'chat_template' must be a string or a list with a 'default' template")


def load_chat_template(folder: Path | str) -> str:
    """The chat template of a model folder: chat_template.jinja, chat_template.json or tokenizer_config.json.

    Args:
        folder: a model folder.

    Returns:
        The jinja source.
    """
    folder = Path(folder)
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    for name in ("chat_template.json", TOKENIZER_CONFIG):
        path = folder / name
        if path.is_file() and "chat_template" in (config := read_json(path)):
            return _template_text(config["chat_template"], source=path)
    raise ValueError(f"{folder} has no chat template (chat_template.jinja, chat_template.json or "
                     "'chat_template' in tokenizer_config.json)")


@dataclass(frozen=True)
class TargetProcessor:
    """Everything the processor files of a MiniCPM-OCR folder say, read once (`read_target_processor`)."""

    image_processor: ImageProcessorConfig
    tokens: MultimodalTokens
    chat_template: str  # jinja source
    special_tokens: dict[str, str]  # bos/eos/pad/unk token strings of tokenizer_config.json the template may use


def read_target_processor(folder: Path | str) -> TargetProcessor:
    """Reads the image settings, the multimodal tokens, the chat template and the special tokens of a folder.

    Args:
        folder: a MiniCPM-OCR folder: a transformers checkpoint or an exported target.
    """
    image_processor = load_image_processor_config(folder)
    config, path = _tokenizer_config(folder)
    special_tokens = {name: value for name in _SPECIAL_TOKEN_FIELDS if isinstance(value := config.get(name), str)}
    return TargetProcessor(image_processor=image_processor, tokens=_multimodal_tokens(config, path),
                           chat_template=load_chat_template(folder), special_tokens=special_tokens)
