"""Slicing grid and resize targets of MiniCPM-OCR, in plain integers.

The same arithmetic as transformers' `MiniCPMOcrImageProcessor` (`get_sliced_grid`, `find_best_resize`,
`get_refine_size`, `ensure_divide`), including its float rounding, so grids and sizes match exactly.
Sizes are `(height, width)` in pixels; grids are `(rows, cols)`.
"""

from __future__ import annotations

import math

__all__ = ["ensure_divide", "find_best_resize", "get_refine_size", "get_sliced_grid"]


def ensure_divide(length: float, divisor: int) -> int:
    """Rounds `length` to the nearest positive multiple of `divisor`."""
    return max(round(length / divisor) * divisor, divisor)


def find_best_resize(image_size: tuple[float, float], *, scale_resolution: int, patch_size: int,
                     merge_factor: int, allow_upscale: bool) -> tuple[int, int]:
    """Size an image (or slice) is resized to: area near `scale_resolution`², sides multiples of merged patches.

    Args:
        image_size: (height, width), possibly fractional for a slice.
        scale_resolution: side of the square whose area the result approximates.
        patch_size: vision patch side in pixels.
        merge_factor: patches merged per side into one token (2 for "4x", 4 for "16x").
        allow_upscale: rescale to `scale_resolution`² even when the image is smaller.

    Returns:
        (height, width) in pixels.
    """
    height, width = image_size
    if height * width > scale_resolution * scale_resolution or allow_upscale:
        aspect_ratio = width / height
        height = int(scale_resolution / math.sqrt(aspect_ratio))
        width = int(height * aspect_ratio)
    step = patch_size * merge_factor
    return ensure_divide(height, step), ensure_divide(width, step)


def get_refine_size(image_size: tuple[int, int], grid: tuple[int, int], *, scale_resolution: int,
                    patch_size: int, merge_factor: int) -> tuple[int, int]:
    """Size the whole image is resized to before it is cut into `grid` equal slices.

    Args:
        image_size: (height, width) of the original image.
        grid: (rows, cols).
        scale_resolution, patch_size, merge_factor: as for `find_best_resize`.

    Returns:
        (height, width) in pixels, divisible by (rows, cols).
    """
    height, width = image_size
    rows, cols = grid
    slice_height, slice_width = find_best_resize(
        (ensure_divide(height, rows) / rows, ensure_divide(width, cols) / cols),
        scale_resolution=scale_resolution, patch_size=patch_size, merge_factor=merge_factor, allow_upscale=True,
    )
    return slice_height * rows, slice_width * cols


def get_sliced_grid(image_size: tuple[int, int], *, max_slice_nums: int,
                    scale_resolution: int) -> tuple[int, int] | None:
    """The (rows, cols) grid whose aspect ratio best fits the image, or None when the image needs no slices.

    Args:
        image_size: (height, width) of the original image.
        max_slice_nums: the most slices allowed.
        scale_resolution: side of the square one slice approximates.
    """
    height, width = image_size
    log_ratio = math.log(width / height)
    multiple = min(math.ceil(width * height / (scale_resolution * scale_resolution)), max_slice_nums)
    if multiple <= 1:
        return None
    best_grid, min_error = (1, 1), float("inf")
    for num_slices in (multiple - 1, multiple, multiple + 1):
        if num_slices == 1 or num_slices > max_slice_nums:
            continue
        for rows in range(1, num_slices + 1):
            if num_slices % rows:
                continue
            error = abs(log_ratio - math.log((num_slices // rows) / rows))
            if error < min_error or (error == min_error and rows > best_grid[0]):
                best_grid, min_error = (rows, num_slices // rows), error
    return best_grid
