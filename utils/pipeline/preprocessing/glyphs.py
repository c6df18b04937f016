"""The glyph classifier behind `small_image_upsize: "adaptive"`, on numpy and scipy (no OpenCV).

MiniCPM-OCR's processor decides per image (and per slice) how far to upscale a small one from the size and
density of its glyphs: small dense text is read at `scale_resolution`, a tiny image at `TINY_RESOLUTION`, the
rest at its native size. Transformers' `adaptive_upsize_resolution` measures the glyphs with OpenCV (an Otsu
threshold, then 8-connected components); this is the same measurement with an Otsu written after OpenCV's
`THRESH_OTSU` (same arithmetic, same tie rule) and `scipy.ndimage.label`, so the decisions are the same
(tests/test_glyphs.py compares both).

Calibration constants (transformers' names and values, "the classifier the checkpoint was trained with"):
    SMALL_FONT_PX          12.0  a median glyph at most this tall (pixels) is small text ...
    DENSE_GLYPHS_PER_KPX   2.0   ... and dense with at least this many glyphs per 1000 pixels
    TINY_PIXELS            6272  an image with fewer pixels (e.g. 79 x 79) is tiny ...
    TINY_RESOLUTION        84    ... and is upscaled towards 84 x 84 pixels (6 x 6 patches of 14)
A glyph is a component of at least `_MIN_GLYPH_AREA` pixels and `_MIN_GLYPH_HEIGHT` rows that spans less than
`_MAX_GLYPH_SPAN` of the image's width and height (rules and table lines are not glyphs).
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

__all__ = ["SMALL_FONT_PX", "DENSE_GLYPHS_PER_KPX", "TINY_PIXELS", "TINY_RESOLUTION", "luma", "otsu_threshold",
           "glyph_heights", "adaptive_upsize_resolution"]

SMALL_FONT_PX = 12.0
DENSE_GLYPHS_PER_KPX = 2.0
TINY_PIXELS = 6272
TINY_RESOLUTION = 84
_MIN_GLYPH_AREA = 3
_MIN_GLYPH_HEIGHT = 2
_MAX_GLYPH_SPAN = 0.9
_FLT_EPSILON = float(np.finfo(np.float32).eps)  # OpenCV compares the class weights with C's FLT_EPSILON
_EIGHT_CONNECTED = np.ones((3, 3), dtype=bool)


def luma(image: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 3] RGB -> uint8 [H, W] ITU-R 601-2 luma, in the integer arithmetic of PIL's `convert("L")`."""
    red, green, blue = (image[..., channel].astype(np.int32) for channel in range(3))
    return ((red * 19595 + green * 38470 + blue * 7471 + 32768) >> 16).astype(np.uint8)


def otsu_threshold(gray: np.ndarray) -> int:
    """Otsu's threshold of a uint8 image, as OpenCV's `THRESH_OTSU` computes it.

    One pass over the 256-bin histogram in float64, in OpenCV's order of operations, so the between-class
    variances are bit for bit OpenCV's; the first of equal maxima wins (OpenCV updates only on `>`), and bins
    whose class weight is within FLT_EPSILON of 0 or 1 are skipped with OpenCV's running-mean quirk kept.
    Pixels <= the threshold are dark (OpenCV's THRESH_BINARY sets them to 0).
    """
    histogram = np.bincount(gray.ravel(), minlength=256).tolist()
    scale = 1.0 / gray.size
    mean = 0.0
    for level, count in enumerate(histogram):
        mean += level * float(count)
    mean *= scale
    mean_low = weight_low = best_variance = 0.0
    threshold = 0
    for level, count in enumerate(histogram):
        probability = count * scale
        mean_low *= weight_low
        weight_low += probability
        weight_high = 1.0 - weight_low
        if min(weight_low, weight_high) < _FLT_EPSILON or max(weight_low, weight_high) > 1.0 - _FLT_EPSILON:
            continue
        mean_low = (mean_low + level * probability) / weight_low
        mean_high = (mean - weight_low * mean_low) / weight_high
        variance = weight_low * weight_high * (mean_low - mean_high) * (mean_low - mean_high)
        if variance > best_variance:
            best_variance, threshold = variance, level
    return threshold


def glyph_heights(gray: np.ndarray) -> np.ndarray:
    """Heights in pixels of the glyphs of a uint8 [H, W] image: 8-connected components of its Otsu foreground.

    The foreground is the dark side of the threshold, or the light side when the dark covers more than half of
    the image (light text on a dark page).
    """
    height, width = gray.shape
    foreground = gray <= otsu_threshold(gray)
    if foreground.mean() > 0.5:
        foreground = ~foreground
    labels, count = ndimage.label(foreground, structure=_EIGHT_CONNECTED)
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    boxes = ndimage.find_objects(labels)
    heights = np.array([rows.stop - rows.start for rows, _ in boxes])
    widths = np.array([cols.stop - cols.start for _, cols in boxes])
    areas = np.bincount(labels.ravel(), minlength=count + 1)[1:]
    glyphs = ((areas >= _MIN_GLYPH_AREA) & (heights >= _MIN_GLYPH_HEIGHT)
              & (widths < _MAX_GLYPH_SPAN * width) & (heights < _MAX_GLYPH_SPAN * height))
    return heights[glyphs]


def adaptive_upsize_resolution(image: np.ndarray, scale_resolution: int) -> int | None:
    """The resolution to upscale a small image (or slice) towards, or None to keep its native size.

    Args:
        image: uint8 [H, W, 3] RGB or [H, W] gray.
        scale_resolution: the resolution small dense text is upscaled to.

    Returns:
        `scale_resolution` for small dense text, `TINY_RESOLUTION` for a tiny image, else None.
    """
    gray = luma(image) if image.ndim == 3 else image
    height, width = gray.shape
    if height == 0 or width == 0:
        return None
    heights = glyph_heights(gray)
    font_px = float(np.median(heights)) if len(heights) else 0.0
    density = len(heights) * 1000.0 / (width * height)
    if 0 < font_px <= SMALL_FONT_PX and density >= DENSE_GLYPHS_PER_KPX:
        return scale_resolution
    if height * width < TINY_PIXELS:
        return TINY_RESOLUTION
    return None
