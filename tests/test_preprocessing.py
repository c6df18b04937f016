"""utils.pipeline.preprocessing against transformers' MiniCPMOcrProcessor: grids, sizes, pixels, prompt ids, bad input.

Tolerance on `pixel_values`: PIL's bicubic and torchvision's antialiased bicubic round differently, so a value may
differ by up to `MAX_LEVELS` uint8 levels (2/255 before normalisation; 0.0157 after it with std 0.5), on at most
`MAX_DIFFERING_FRACTION` of the values. Grids, `target_sizes` and prompt token ids must be equal.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image, ImageOps

from utils.pages.samples import printed_sample_pages, render_page
from utils.pipeline.preprocessing import ChatPromptBuilder, ImagePreprocessor

MAX_LEVELS = 2
MAX_DIFFERING_FRACTION = 0.02
SIZES = [(20, 20), (800, 100), (100, 900), (300, 300), (1500, 2000), (1, 1), (3000, 400)]  # (width, height)
OCR_MESSAGES = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Text Recognition:"}]}]


def _processor_folder(tiny_pair, folder, **image_settings):
    """A folder with transformers' image-processor defaults (the real model's: scale_resolution 448,
    max_slice_nums 9) overridden by `image_settings`, and the tiny tokenizer."""
    from transformers import AutoTokenizer, MiniCPMOcrImageProcessor, MiniCPMOcrProcessor, MiniCPMOcrVideoProcessor

    MiniCPMOcrProcessor(image_processor=MiniCPMOcrImageProcessor(**image_settings),
                        video_processor=MiniCPMOcrVideoProcessor(),
                        tokenizer=AutoTokenizer.from_pretrained(tiny_pair.target)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def real_defaults_folder(tiny_pair, tmp_path_factory):
    return _processor_folder(tiny_pair, tmp_path_factory.mktemp("real-defaults"))


@pytest.fixture(scope="module", params=["tiny", "real-defaults"])
def folder(request, tiny_pair):
    return tiny_pair.target if request.param == "tiny" else request.getfixturevalue("real_defaults_folder")


@pytest.fixture(scope="module")
def hf_processor(folder):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(folder)


def _photo(width: int, height: int, *, seed: int = 0) -> Image.Image:
    """Smooth stripes plus noise: resampling differences show on both."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.sin(x / 7.0)[..., None] * 80 + np.cos(y / 11.0)[..., None] * 60 + 128
    return Image.fromarray(np.clip(base + rng.normal(0, 25, (height, width, 3)), 0, 255).astype(np.uint8))


def _assert_pixels_close(ours: np.ndarray, theirs: np.ndarray, *, level: float) -> None:
    assert ours.shape == theirs.shape and ours.dtype == np.float32
    difference = np.abs(ours - theirs)
    assert difference.max() <= MAX_LEVELS * level + 1e-6, f"max |diff| {difference.max()} > {MAX_LEVELS} levels"
    assert (difference > 1e-6).mean() <= MAX_DIFFERING_FRACTION


def _level(processor) -> float:
    """One uint8 level after rescale + normalise."""
    image_processor = processor.image_processor
    return image_processor.rescale_factor / min(image_processor.image_std)


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_inputs_and_prompt_ids_match_transformers(folder, hf_processor, size):
    _assert_matches_transformers(folder, hf_processor, _photo(*size))


def _assert_matches_transformers(folder, hf_processor, image: Image.Image):
    """Grids, target sizes, prompt ids and image-token counts equal; pixels within `MAX_LEVELS`."""
    ours = ImagePreprocessor.from_pretrained(folder)(image)
    prompt = ChatPromptBuilder.from_pretrained(folder)([ours.placeholder])

    chat = hf_processor.apply_chat_template(OCR_MESSAGES, add_generation_prompt=True, tokenize=False)
    theirs = hf_processor(images=[image], text=[chat], return_tensors="np")
    grids = hf_processor.image_processor([image], return_tensors="np")["grids"]

    assert list(ours.grid) == list(grids[0])
    assert ours.target_sizes.dtype == np.int32
    np.testing.assert_array_equal(ours.target_sizes, theirs["target_sizes"])
    _assert_pixels_close(ours.pixel_values, theirs["pixel_values"], level=_level(hf_processor))
    ids = hf_processor.tokenizer(prompt)["input_ids"]
    assert ids == theirs["input_ids"][0].tolist()
    assert ids.count(hf_processor.image_token_id) == ours.num_image_tokens


@pytest.fixture(scope="module", params=["4x", "16x"])
def adaptive_folder(request, tiny_pair, tmp_path_factory):
    """Real-scale settings with the adaptive upsizing of the published processor config, in both modes."""
    folder = tmp_path_factory.mktemp(f"adaptive-{request.param}")
    return _processor_folder(tiny_pair, folder, small_image_upsize="adaptive", downsample_mode=request.param)


def _adaptive_pages() -> dict[str, Image.Image]:
    """Pages that resolve differently under "adaptive": small dense text (upscaled), large text (kept native),
    tiny images (towards 84 px), light text on dark, and sliced pages whose slices resolve differently."""
    pages = [page.image for page in printed_sample_pages()]
    large_text = pages[0].resize((pages[0].width * 2, pages[0].height * 2), Image.Resampling.NEAREST)
    mixed = Image.new("RGB", (701, 420), "white")  # 1 x 2 slices: dense text left, large text right from x = 350
    mixed.paste(pages[3], (0, 0))
    mixed.paste(pages[5], (0, 200))
    mixed.paste(large_text.crop((0, 0, 340, 170)), (360, 240))
    exact_cell = Image.new("RGB", (560, 392), "white")  # 1 x 2 slices of 280 x 392: the blank one is kept as it is
    exact_cell.paste(pages[1], (5, 5))
    exact_cell.paste(pages[4], (5, 150))
    rounded_cells = Image.new("RGB", (300, 1052), "white")  # 3 x 1 slices cut at rows 351 and 701 (round, not floor)
    rounded_cells.paste(large_text, (0, 400))
    long_page = render_page("\n".join(page.text for page in printed_sample_pages()), chars_per_line=90)
    long_page_2x = long_page.resize((long_page.width * 2, long_page.height * 2), Image.Resampling.BICUBIC)
    return {"text-block": pages[0], "table": pages[1], "receipt": pages[4], "light-on-dark": ImageOps.invert(pages[3]),
            "large-text": large_text, "tiny-blank": Image.new("RGB", (40, 30), "white"),
            "tiny-text": pages[0].crop((0, 0, 60, 20)), "photo": _photo(120, 90), "mixed-slices": mixed,
            "exact-cell": exact_cell, "rounded-cells": rounded_cells, "sliced-page": long_page,
            "sliced-page-2x": long_page_2x}


ADAPTIVE_PAGES = _adaptive_pages()


@pytest.mark.parametrize("name", list(ADAPTIVE_PAGES))
def test_adaptive_upsizing_matches_transformers(adaptive_folder, name):
    from transformers import AutoProcessor

    _assert_matches_transformers(adaptive_folder, AutoProcessor.from_pretrained(adaptive_folder), ADAPTIVE_PAGES[name])


def test_adaptive_upsizing_resolves_each_image_and_slice_on_its_own(adaptive_folder):
    """The pages above really take the classifier's branches: otherwise the parity test proves little."""
    preprocess = ImagePreprocessor.from_pretrained(adaptive_folder)
    always = ImagePreprocessor(dataclasses.replace(preprocess.config, small_image_upsize="always"),
                               tokens=preprocess.tokens)
    never = ImagePreprocessor(dataclasses.replace(preprocess.config, small_image_upsize="never"),
                              tokens=preprocess.tokens)
    sizes = {name: preprocess(image).target_sizes.tolist() for name, image in ADAPTIVE_PAGES.items()}
    assert sizes["text-block"] == always(ADAPTIVE_PAGES["text-block"]).target_sizes.tolist()
    assert sizes["large-text"] == never(ADAPTIVE_PAGES["large-text"]).target_sizes.tolist()
    assert sizes["tiny-blank"] not in (always(ADAPTIVE_PAGES["tiny-blank"]).target_sizes.tolist(),
                                       never(ADAPTIVE_PAGES["tiny-blank"]).target_sizes.tolist())
    _, dense, large = sizes["mixed-slices"]
    assert dense == always(ADAPTIVE_PAGES["mixed-slices"]).target_sizes.tolist()[1]
    assert large[0] * large[1] < dense[0] * dense[1]
    assert len({tuple(size) for size in sizes["exact-cell"][1:]}) == 2


def _page_sizes(count: int, *, max_aspect_ratio: float) -> list[tuple[int, int]]:
    """(width, height) of random pages up to `max_aspect_ratio` either way, plus the thinnest ones."""
    rng = np.random.default_rng(3)
    sizes = [(int(rng.integers(1, 2400)), 0) for _ in range(count)]
    sizes = [(width, int(np.clip(width * max_aspect_ratio ** rng.uniform(-1, 1), 1, 2400))) for width, _ in sizes]
    return sizes + [(20 * side, side) for side in (1, 3, 14, 22, 60, 150)] + [(1344, 1344), (1400, 1300)]


@pytest.mark.parametrize("downsample_mode", ["4x", "16x"])
@pytest.mark.parametrize("upsize", ["always", "adaptive"])
def test_max_image_tokens_bounds_pages_up_to_20_to_1(real_defaults_folder, downsample_mode, upsize):
    """The bound the pipeline checks against the context at load (`max_image_tokens`) holds, and is tight."""
    preprocess = ImagePreprocessor.from_pretrained(real_defaults_folder)
    config = dataclasses.replace(preprocess.config, downsample_mode=downsample_mode, small_image_upsize=upsize)
    preprocess = ImagePreprocessor(config, tokens=preprocess.tokens)
    counts = [preprocess(Image.new("RGB", size, "white")).num_image_tokens
              for size in _page_sizes(30, max_aspect_ratio=20)]
    assert max(counts) <= config.max_image_tokens
    assert max(counts) >= 0.75 * config.max_image_tokens


def test_real_scale_slices_a_large_page_into_a_three_by_three_grid(real_defaults_folder):
    ours = ImagePreprocessor.from_pretrained(real_defaults_folder)(_photo(1500, 2000))
    assert ours.grid == (3, 3)
    assert ours.target_sizes.shape == (10, 2)
    assert ours.placeholder.count("<slice>") == 9 and ours.placeholder.count("\n") == 2


def test_prompt_wraps_the_image_in_id_and_image_tokens(tiny_pair):
    ours = ImagePreprocessor.from_pretrained(tiny_pair.target)(_photo(20, 20))
    prompt = ChatPromptBuilder.from_pretrained(tiny_pair.target)([ours.placeholder])
    assert prompt == ("<|im_start|>user\n<image_id>0</image_id><image>" + "<|image_pad|>" * 16 + "</image>"
                      "Text Recognition:<|im_end|>\n<|im_start|>assistant\n")


SWITCHED_TEMPLATE = (  # the shape of Qwen3.5-family templates: thinking unless enable_thinking is false
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% for c in m.content %}"
    "{% if c.type == 'image' %}<image>{% else %}{{ c.text }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}")


def test_a_template_with_a_thinking_switch_is_rendered_in_non_thinking_mode_unless_asked(tiny_pair):
    from utils.contract.processor import load_multimodal_tokens

    tokens = load_multimodal_tokens(tiny_pair.target)
    template = SWITCHED_TEMPLATE.replace("<image>", tokens.image_token)  # the one image token the template writes
    build = ChatPromptBuilder(template, tokens=tokens, use_image_id=False, special_tokens={})
    assert build(["[page]"]) == ("<|im_start|>user\n[page]Text Recognition:<|im_end|>\n"
                                 "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    thinking = ChatPromptBuilder(template, tokens=tokens, use_image_id=False, special_tokens={},
                                 template_kwargs={"enable_thinking": True})
    assert thinking(["[page]"]).endswith("<|im_start|>assistant\n")
    plain = ChatPromptBuilder.from_pretrained(tiny_pair.target)  # no switch in the tiny template: no argument
    assert plain.template_kwargs == {}


def _image_in_mode(mode: str) -> Image.Image:
    rgba = np.asarray(_photo(90, 60, seed=1).convert("RGBA")).copy()
    rgba[..., 3] = np.linspace(0, 255, 90, dtype=np.uint8)[None, :]
    image = Image.fromarray(rgba)
    if mode == "P-transparent":
        palette = image.convert("RGB").convert("P")
        palette.info["transparency"] = 0
        return palette
    if mode == "I;16":
        return Image.fromarray((np.asarray(image.convert("L"), dtype=np.uint16) * 3))
    return image.convert(mode)


@pytest.mark.parametrize("mode", ["RGBA", "LA", "L", "1", "P", "P-transparent", "CMYK", "I;16"])
def test_any_image_mode_converts_like_transformers(tiny_pair, mode):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_pair.target)
    image = _image_in_mode(mode)
    ours = ImagePreprocessor.from_pretrained(tiny_pair.target)(image)
    theirs = processor.image_processor([image], return_tensors="np")
    _assert_pixels_close(ours.pixel_values, theirs["pixel_values"], level=_level(processor))


def test_path_bytes_and_pil_inputs_give_the_same_pixels(tiny_pair, tmp_path):
    image = _photo(120, 80)
    path = tmp_path / "page.png"
    image.save(path)
    preprocess = ImagePreprocessor.from_pretrained(tiny_pair.target)
    expected = preprocess(image).pixel_values
    np.testing.assert_array_equal(preprocess(path).pixel_values, expected)
    np.testing.assert_array_equal(preprocess(str(path)).pixel_values, expected)
    np.testing.assert_array_equal(preprocess(path.read_bytes()).pixel_values, expected)


def test_files_are_turned_upright_by_their_exif_orientation(tiny_pair):
    image = _photo(120, 40)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", exif=exif)
    preprocess = ImagePreprocessor.from_pretrained(tiny_pair.target)
    upright = preprocess(image.transpose(Image.Transpose.ROTATE_270))
    from_file = preprocess(buffer.getvalue())
    np.testing.assert_array_equal(from_file.target_sizes, upright.target_sizes)
    np.testing.assert_array_equal(from_file.pixel_values, upright.pixel_values)


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims `width` x `height` pixels, with almost no data: a decompression bomb stand-in."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0")) + chunk(b"IEND", b"")


def test_bad_images_raise_value_errors_that_say_why(tiny_pair, tmp_path):
    preprocess = ImagePreprocessor.from_pretrained(tiny_pair.target)
    text_file = tmp_path / "notes.txt"
    text_file.write_text("not an image")
    with pytest.raises(ValueError, match=r"notes\.txt is not an image PIL can read"):
        preprocess(text_file)
    with pytest.raises(ValueError, match=r"the 5-byte input is not an image PIL can read"):
        preprocess(b"hello")
    with pytest.raises(ValueError, match=r"the RGB image is empty: 0x7 pixels"):
        preprocess(Image.new("RGB", (0, 7)))
    with pytest.raises(ValueError, match=r"too large to decode safely"):
        preprocess(_png_header_only(100_000, 100_000))
    with pytest.raises(ValueError, match=r"too large to decode safely: 9000x8000 = 72000000 pixels, the limit is 67108864"):
        preprocess(_png_header_only(9000, 8000))
    truncated = io.BytesIO()
    _photo(64, 64).save(truncated, format="PNG")
    with pytest.raises(ValueError, match=r"could not be decoded"):
        preprocess(truncated.getvalue()[:200])


def test_pixel_limit_is_configurable(tiny_pair):
    preprocess = ImagePreprocessor.from_pretrained(tiny_pair.target, max_pixels=100)
    with pytest.raises(ValueError, match=r"11x10 = 110 pixels, the limit is 100"):
        preprocess(Image.new("RGB", (11, 10)))
    assert preprocess(Image.new("RGB", (10, 10))).num_image_tokens > 0


def test_unsupported_settings_and_missing_files_are_named(tiny_pair, tmp_path):
    import json
    import shutil

    with pytest.raises(ValueError, match="has neither processor_config.json"):
        ImagePreprocessor.from_pretrained(tmp_path)
    folder = tmp_path / "unsupported"
    shutil.copytree(tiny_pair.target, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    config_path = folder / "processor_config.json"
    config = json.loads(config_path.read_text())
    config["image_processor"]["small_image_upsize"] = "sometimes"
    config_path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"processor_config.json: small_image_upsize 'sometimes' is not supported "
                                         r"\(supported: always, never, adaptive\)"):
        ImagePreprocessor.from_pretrained(folder)
    config["image_processor"].update(small_image_upsize="adaptive", downsample_mode="64x")
    config_path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"processor_config.json: downsample_mode must be one of \['16x', '4x'\], "
                                         r"got '64x'"):
        ImagePreprocessor.from_pretrained(folder)


def test_preprocessing_imports_neither_torch_nor_transformers(tiny_pair, run_without_torch):
    run_without_torch(
        "from PIL import Image\nfrom utils.pipeline.preprocessing import ImagePreprocessor, ChatPromptBuilder\n"
        f"folder = {str(tiny_pair.target)!r}\n"
        "image = ImagePreprocessor.from_pretrained(folder)(Image.new('RGB', (500, 300)))\n"
        "ChatPromptBuilder.from_pretrained(folder)([image.placeholder])\n"
    )
