"""Opening images safely and converting them to RGB exactly as transformers does.

Inputs are a path, raw bytes or a PIL image of any mode and size. Everything that cannot become a usable RGB
image fails with a ValueError that says why: an empty file, not an image, no pixels, or more pixels than
`MAX_IMAGE_PIXELS` (checked from the header, before any pixel is decoded, so a decompression bomb costs nothing).
"""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path

from PIL import Image, ImageOps, UnidentifiedImageError

__all__ = ["MAX_IMAGE_PIXELS", "ImageSource", "load_rgb_image"]

# 2**26 = 67,108,864 pixels (8192 x 8192): a scanned A4 page at 600 dpi has 35 M; decoding the limit as RGB
# takes about 200 MB. PIL's own bomb limit (89 M, error above twice that) stays active as a second line.
MAX_IMAGE_PIXELS = 1 << 26

ImageSource = str | os.PathLike | bytes | bytearray | memoryview | Image.Image


def _describe(source: ImageSource) -> str:
    if isinstance(source, Image.Image):
        return f"the {source.mode} image"
    if isinstance(source, (bytes, bytearray, memoryview)):
        return f"the {len(source)}-byte input"
    return str(source)


def _check_size(image: Image.Image, *, name: str, max_pixels: int) -> None:
    width, height = image.size
    if width * height == 0:
        raise ValueError(f"{name} is empty: {width}x{height} pixels")
    if width * height > max_pixels:
        raise ValueError(f"{name} is too large to decode safely: {width}x{height} = {width * height} pixels, "
                         f"the limit is {max_pixels}")


def _open(source: ImageSource, *, name: str) -> Image.Image:
    if isinstance(source, (bytes, bytearray, memoryview)):
        source = io.BytesIO(bytes(source))
    elif not Path(source).is_file():
        raise FileNotFoundError(f"{name} does not exist or is not a file")
    elif Path(source).stat().st_size == 0:
        raise ValueError(f"{name} is empty: 0 bytes")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            return Image.open(source)
    except UnidentifiedImageError as error:
        raise ValueError(f"{name} is not an image PIL can read") from error
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise ValueError(f"{name} is too large to decode safely: {error}") from error


def _to_rgb(image: Image.Image) -> Image.Image:
    """RGB with transparency composited onto white, as transformers' `convert_to_rgb` does.

    16-bit and float modes are clipped to 0..255 by PIL's conversion, as in transformers.
    """
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def load_rgb_image(source: ImageSource, *, max_pixels: int = MAX_IMAGE_PIXELS,
                   name: str | None = None) -> Image.Image:
    """Opens, checks and decodes an image into an RGB PIL image.

    Files and bytes are turned upright by their EXIF orientation (as transformers' `load_image` does);
    a PIL image is taken as it is.

    Args:
        source: a path, encoded bytes, or a PIL image.
        max_pixels: the largest width x height accepted.
        name: how messages name the image (default: the path, or the input's size and kind).

    Returns:
        A decoded RGB image of the same size.
    """
    if not isinstance(source, ImageSource):
        raise TypeError(f"expected a path, bytes or a PIL image, got {type(source).__name__}")
    name = name or _describe(source)
    image = source if isinstance(source, Image.Image) else _open(source, name=name)
    _check_size(image, name=name, max_pixels=max_pixels)
    try:
        image.load()
        if not isinstance(source, Image.Image):
            image = ImageOps.exif_transpose(image)
        return _to_rgb(image)
    except (OSError, SyntaxError) as error:
        raise ValueError(f"{name} could not be decoded: {error}") from error
