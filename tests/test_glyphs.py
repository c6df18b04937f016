"""The torch- and OpenCV-free glyph classifier against OpenCV and transformers' `adaptive_upsize_resolution`.

Both must be equal exactly: the Otsu threshold level, and the resolution each image resolves to. OpenCV is a
test-only dependency (requirements-test.txt), the reference the checkpoint's classifier was written with.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from PIL import Image, ImageOps

from utils.pages.samples import printed_sample_pages, render_page
from utils.pipeline.preprocessing.glyphs import TINY_RESOLUTION, adaptive_upsize_resolution, luma, otsu_threshold


def _gray_images() -> list[np.ndarray]:
    """uint8 images whose histograms stress Otsu: noise, few levels, exact ties, one level, sparse bins."""
    rng = np.random.default_rng(0)
    images = []
    for index in range(300):
        height, width = (int(side) for side in rng.integers(1, 120, 2))
        kind = index % 6
        if kind == 0:
            image = rng.integers(0, 256, (height, width))
        elif kind == 1:
            image = rng.choice(rng.integers(0, 256, int(rng.integers(1, 5))), (height, width))
        elif kind == 2:  # two levels in equal halves: every threshold between them ties
            low, high = np.sort(rng.integers(0, 256, 2))
            image = np.where(np.arange(height * width).reshape(height, width) % 2, low, high)
        elif kind == 3:  # four equally spaced, equally frequent levels: a symmetric histogram
            image = np.resize(np.array([10, 20, 30, 40]), (height, width))
        elif kind == 4:
            image = np.clip(rng.normal(128, 40, (height, width)), 0, 255)
        else:
            image = np.full((height, width), int(rng.integers(0, 256)))
        images.append(image.astype(np.uint8))
    sparse = np.full((3000, 3000), 200, np.uint8)  # bins of a pixel or two: weights below FLT_EPSILON
    sparse[0, 0], sparse[0, 1], sparse[1, :100] = 0, 5, 50
    return images + [sparse]


def test_otsu_threshold_equals_opencv_thresh_otsu():
    images = _gray_images()
    ours = [otsu_threshold(image) for image in images]
    theirs = [int(cv2.threshold(image, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)[0]) for image in images]
    assert ours == theirs
    assert len(set(ours)) > 50  # the images really reach many thresholds


def test_luma_equals_pil_convert_l():
    rgb = np.random.default_rng(1).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    np.testing.assert_array_equal(luma(rgb), np.asarray(Image.fromarray(rgb).convert("L")))


def _classifier_images() -> list[Image.Image]:
    """Pages and crops that reach every decision: small dense text, large sparse text, tiny, blank, inverted."""
    pages = [page.image for page in printed_sample_pages()]
    large_text = pages[0].resize((pages[0].width * 3, pages[0].height * 3), Image.Resampling.NEAREST)
    blank = Image.new("RGB", (300, 200), "white")
    noise = Image.fromarray(np.random.default_rng(2).integers(0, 256, (90, 120, 3), dtype=np.uint8))
    tall = render_page("\n".join(page.text for page in printed_sample_pages()), chars_per_line=40)
    return [*pages, *(ImageOps.invert(page) for page in pages[:3]), large_text, blank, noise, tall,
            pages[1].crop((0, 0, 60, 40)), pages[2].crop((0, 0, 30, 20)), Image.new("RGB", (1, 1), "black"),
            Image.new("RGB", (200, 30), "white"), pages[3].resize((80, 45))]


@pytest.mark.parametrize("scale_resolution", [448, 112])
def test_resolution_decision_equals_adaptive_upsize_resolution(scale_resolution):
    from transformers.models.minicpm_ocr.image_processing_minicpm_ocr import adaptive_upsize_resolution as reference

    decisions = []
    for image in _classifier_images():
        pixels = np.asarray(image)
        ours = adaptive_upsize_resolution(pixels, scale_resolution)
        assert ours == reference(pixels.transpose(2, 0, 1), scale_resolution), image.size
        decisions.append(ours)
    assert {scale_resolution, TINY_RESOLUTION, None} <= set(decisions)  # every branch was taken
