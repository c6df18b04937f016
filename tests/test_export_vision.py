"""Vision, text-embedding and tokenizer IR of the tiny target against transformers.

Tolerances: fp32 IR compiled with the f32 hint (this CPU defaults to bf16) must give the features of
`get_image_features` within `FEATURES_ATOL`, in "4x" and in "16x" mode (measured <= 1.9e-6 and <= 2.1e-6 on
features of magnitude up to ~4.5); the fp16-weight IR within `FP16_ATOL` (measured <= 1.8e-3).
The embedding table lookup and the tokenizer round trip must be exact.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PIL import Image

from utils.contract import TEXT_EMBEDDINGS_NAME, VISION_EMBEDDINGS_NAME
from utils.engine.device import F32_PROPERTIES
from utils.pipeline.preprocessing import ChatPromptBuilder, ImagePreprocessor
from utils.pipeline.vision import TextEmbeddings, VisionEncoder, split_tiles

FEATURES_ATOL = 1e-4
FP16_ATOL = 1e-2
SIZES = [(20, 20), (800, 100), (100, 900), (300, 300), (1500, 2000), (1, 1)]  # (width, height)


@pytest.fixture(scope="module")
def model(tiny_pair):
    from transformers import MiniCPMOcrForConditionalGeneration

    return MiniCPMOcrForConditionalGeneration.from_pretrained(tiny_pair.target).eval()


@pytest.fixture(scope="module")
def export_folder(model, tiny_pair, tmp_path_factory):
    from utils.export.compression import save_ir
    from utils.export.tokenizer import export_tokenizer
    from utils.export.vision import convert_text_embeddings, convert_vision_embeddings

    folder = tmp_path_factory.mktemp("export")
    save_ir(convert_vision_embeddings(model), folder / VISION_EMBEDDINGS_NAME, weight_format="fp32")
    save_ir(convert_text_embeddings(model), folder / TEXT_EMBEDDINGS_NAME, weight_format="fp32")
    export_tokenizer(tiny_pair.target, folder)
    return folder


@pytest.fixture(scope="module")
def encoder(export_folder):
    return VisionEncoder(export_folder, "CPU", properties=F32_PROPERTIES)


@pytest.fixture(scope="module")
def model_16x(tiny_pair):
    """The tiny target read in "16x" mode: its ViT window merger runs after vision layer `insert_layer_id` (0 of 2)."""
    from transformers import MiniCPMOcrForConditionalGeneration

    model = MiniCPMOcrForConditionalGeneration.from_pretrained(tiny_pair.target, downsample_mode="16x").eval()
    assert 0 <= model.config.vision_config.insert_layer_id < model.config.vision_config.num_hidden_layers - 1
    return model


@pytest.fixture(scope="module")
def export_folder_16x(model_16x, tmp_path_factory):
    from utils.export.compression import save_ir
    from utils.export.vision import convert_vision_embeddings

    folder = tmp_path_factory.mktemp("export-16x")
    save_ir(convert_vision_embeddings(model_16x), folder / VISION_EMBEDDINGS_NAME, weight_format="fp32")
    return folder


def _image(width: int, height: int) -> Image.Image:
    rng = np.random.default_rng(width * 10_000 + height)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def _reference_features(model, pixel_values: np.ndarray, target_sizes: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        output = model.model.get_image_features(torch.from_numpy(pixel_values), torch.from_numpy(target_sizes),
                                                downsample_mode=model.config.downsample_mode)
    return torch.cat(output.pooler_output).numpy()


def _preprocessor(tiny_pair, *, scale: str, downsample_mode: str = "4x") -> ImagePreprocessor:
    """The tiny target's preprocessing, or at the real model's slicing (448 px slices, up to 9: bigger tiles,
    3 x 3 grids), in `downsample_mode`."""
    preprocess = ImagePreprocessor.from_pretrained(tiny_pair.target)
    real = {"scale_resolution": 448, "max_slice_nums": 9} if scale == "real" else {}
    config = dataclasses.replace(preprocess.config, downsample_mode=downsample_mode, **real)
    return ImagePreprocessor(config, tokens=preprocess.tokens)


def _assert_features_match(model, encoder, preprocess: ImagePreprocessor, image: Image.Image) -> None:
    inputs = preprocess(image)
    features = encoder(inputs.pixel_values, inputs.target_sizes)
    expected = _reference_features(model, inputs.pixel_values, inputs.target_sizes)
    assert features.shape == expected.shape == (inputs.num_image_tokens, model.config.text_config.hidden_size)
    np.testing.assert_allclose(features, expected, rtol=0, atol=FEATURES_ATOL)


@pytest.mark.parametrize("scale", ["tiny", "real"])
@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_vision_ir_features_match_get_image_features(model, tiny_pair, encoder, size, scale):
    _assert_features_match(model, encoder, _preprocessor(tiny_pair, scale=scale), _image(*size))


@pytest.mark.parametrize("scale", ["tiny", "real"])
@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_16x_vision_ir_features_match_get_image_features(model_16x, tiny_pair, export_folder_16x, size, scale):
    """The ViT window merger inside the encoder, then the merger MLP: one feature per 4 x 4 patches."""
    preprocess = _preprocessor(tiny_pair, scale=scale, downsample_mode="16x")
    encoder = VisionEncoder(export_folder_16x, "CPU", properties=F32_PROPERTIES, image_processor=preprocess.config)
    _assert_features_match(model_16x, encoder, preprocess, _image(*size))


def test_vision_ir_records_its_downsample_mode(export_folder, export_folder_16x):
    import openvino as ov

    from utils.contract import DOWNSAMPLE_MODE_RT_INFO_KEY

    for folder, mode in ((export_folder, "4x"), (export_folder_16x, "16x")):
        vision = ov.Core().read_model(folder / VISION_EMBEDDINGS_NAME)
        assert vision.get_rt_info(DOWNSAMPLE_MODE_RT_INFO_KEY).astype(str) == mode
        assert VisionEncoder(folder).downsample_mode == mode


def test_preprocessing_in_another_mode_is_refused_at_load(tiny_pair, export_folder, export_folder_16x):
    config = ImagePreprocessor.from_pretrained(tiny_pair.target).config
    for folder, preprocessing_mode, ir_mode in ((export_folder, "16x", "4x"), (export_folder_16x, "4x", "16x")):
        with pytest.raises(ValueError, match=rf"processor_config\.json: downsample_mode='{preprocessing_mode}', but "
                                             rf".*{VISION_EMBEDDINGS_NAME} was exported with downsample_mode="
                                             rf"'{ir_mode}' \(config\.json\); the two files must agree"):
            VisionEncoder(folder, image_processor=dataclasses.replace(config, downsample_mode=preprocessing_mode))


def test_16x_export_needs_an_insert_layer_inside_the_encoder(model_16x):
    import copy

    from utils.export.vision import VisionEmbeddingsWrapper

    broken = copy.deepcopy(model_16x)
    broken.config.vision_config.insert_layer_id = broken.config.vision_config.num_hidden_layers
    with pytest.raises(ValueError, match=r"config.json: insert_layer_id=2 must be a vision encoder layer in \[0, 1\] "
                                         r"for downsample_mode '16x'"):
        VisionEmbeddingsWrapper(broken)
    broken.config.downsample_mode = "64x"
    with pytest.raises(ValueError, match=r"config.json: downsample_mode '64x' is not supported"):
        VisionEmbeddingsWrapper(broken)


def test_features_and_embeddings_fill_the_prompt_like_the_model_does(model, tiny_pair, export_folder, encoder):
    """Runtime inputs_embeds (text rows + image features scattered in order) equal what transformers feeds its LM."""
    import openvino_genai as ov_genai
    import torch

    inputs = ImagePreprocessor.from_pretrained(tiny_pair.target)(_image(500, 300))
    prompt = ChatPromptBuilder.from_pretrained(tiny_pair.target)([inputs.placeholder])
    input_ids = ov_genai.Tokenizer(str(export_folder)).encode(prompt).input_ids.data.astype(np.int64)

    embeds = TextEmbeddings(export_folder, "CPU", properties=F32_PROPERTIES)(input_ids)
    embeds[input_ids == model.config.image_token_id] = encoder(inputs.pixel_values, inputs.target_sizes)

    captured = {}
    hook = model.model.language_model.register_forward_pre_hook(
        lambda module, args, kwargs: captured.update(kwargs), with_kwargs=True)
    try:
        with torch.no_grad():
            model(input_ids=torch.from_numpy(input_ids), pixel_values=torch.from_numpy(inputs.pixel_values),
                  target_sizes=torch.from_numpy(inputs.target_sizes))
    finally:
        hook.remove()
    np.testing.assert_allclose(embeds, captured["inputs_embeds"].numpy(), rtol=0, atol=FEATURES_ATOL)


def test_text_embeddings_ir_returns_the_table_rows(model, export_folder):
    table = model.get_input_embeddings().weight.detach().numpy()
    ids = np.array([[0, 1, model.config.image_token_id, table.shape[0] - 1], [5, 5, 6, 7]], dtype=np.int64)
    np.testing.assert_array_equal(TextEmbeddings(export_folder, "CPU", properties=F32_PROPERTIES)(ids), table[ids])


def test_vision_ir_shapes_are_dynamic(export_folder):
    import openvino as ov

    vision = ov.Core().read_model(export_folder / VISION_EMBEDDINGS_NAME)
    shapes = {port.get_any_name(): str(port.get_partial_shape()) for port in vision.inputs}
    assert shapes == {"pixel_values": "[?,3,14,?]", "target_sizes": "[1,2]"}
    assert vision.outputs[0].get_any_name() == "image_features"
    text = ov.Core().read_model(export_folder / TEXT_EMBEDDINGS_NAME)
    assert str(text.inputs[0].get_partial_shape()) == "[?,?]" and text.outputs[0].get_any_name() == "inputs_embeds"


def test_fp16_weights_stay_close(model, tiny_pair, tmp_path):
    from utils.export.compression import save_ir
    from utils.export.vision import convert_vision_embeddings

    save_ir(convert_vision_embeddings(model), tmp_path / VISION_EMBEDDINGS_NAME, weight_format="fp16")
    inputs = ImagePreprocessor.from_pretrained(tiny_pair.target)(_image(300, 300))
    features = VisionEncoder(tmp_path, "CPU", properties=F32_PROPERTIES)(inputs.pixel_values, inputs.target_sizes)
    expected = _reference_features(model, inputs.pixel_values, inputs.target_sizes)
    np.testing.assert_allclose(features, expected, rtol=0, atol=FP16_ATOL)


def test_mismatched_tiles_raise_value_errors(tmp_path):
    with pytest.raises(ValueError, match=r"do not hold tiles of sizes \[\[2, 2\]\]"):
        split_tiles(np.zeros((1, 3, 14, 14 * 5), np.float32), np.array([[2, 2]]))
    with pytest.raises(ValueError, match=rf"{VISION_EMBEDDINGS_NAME} does not exist"):
        VisionEncoder(tmp_path)


def test_tokenizer_ir_encodes_the_ocr_prompt_and_decodes_like_hf(tiny_pair, export_folder):
    import openvino_genai as ov_genai
    from transformers import AutoTokenizer

    hf_tokenizer = AutoTokenizer.from_pretrained(tiny_pair.target)
    ov_tokenizer = ov_genai.Tokenizer(str(export_folder))
    inputs = ImagePreprocessor.from_pretrained(tiny_pair.target)(_image(300, 200))
    prompt = ChatPromptBuilder.from_pretrained(export_folder)([inputs.placeholder])
    for text in (prompt, "Invoice No. 4711 — total: 1.234,56 € (naïve café, 東京)\n\tend  "):
        assert ov_tokenizer.encode(text).input_ids.data[0].tolist() == hf_tokenizer(text)["input_ids"]

    generated = np.random.default_rng(0).integers(0, len(hf_tokenizer), 200).tolist()
    generated[::17] = [hf_tokenizer.eos_token_id] * len(generated[::17])
    for ids in (generated, hf_tokenizer(prompt)["input_ids"]):
        assert ov_tokenizer.decode(ids, skip_special_tokens=True) == hf_tokenizer.decode(ids, skip_special_tokens=True)
    assert ov_tokenizer.chat_template == hf_tokenizer.chat_template


def test_runtime_path_imports_neither_torch_nor_transformers(export_folder, run_without_torch):
    run_without_torch(
        "import numpy as np\nfrom PIL import Image\n"
        "from utils.pipeline.preprocessing import ImagePreprocessor\n"
        "from utils.pipeline.vision import TextEmbeddings, VisionEncoder\n"
        f"folder = {str(export_folder)!r}\n"
        "inputs = ImagePreprocessor.from_pretrained(folder)(Image.new('RGB', (300, 200)))\n"
        "features = VisionEncoder(folder)(inputs.pixel_values, inputs.target_sizes)\n"
        "assert features.shape[0] == inputs.num_image_tokens\n"
        "TextEmbeddings(folder)(np.zeros((1, 3), np.int64))\n"
    )
