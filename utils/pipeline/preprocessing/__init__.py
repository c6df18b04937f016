"""Image -> model inputs for MiniCPM-OCR with numpy and PIL only (no torch, no transformers).

- `ImagePreprocessor`: image -> `PreprocessedImage` (`pixel_values`, `target_sizes`, placeholder text).
- `ChatPromptBuilder`: placeholders + instruction -> the full chat prompt the tokenizer encodes.
- `load_rgb_image`: safe opening of paths, bytes and PIL images of any mode.

Every setting is read from the model folder, so the same code serves the tiny pair and the real checkpoint.
"""

from .image_io import MAX_IMAGE_PIXELS, load_rgb_image
from .processor import ImagePreprocessor, PreprocessedImage
from .prompt import DEFAULT_PROMPT, ChatPromptBuilder

__all__ = ["MAX_IMAGE_PIXELS", "DEFAULT_PROMPT", "ImagePreprocessor", "PreprocessedImage", "ChatPromptBuilder",
           "load_rgb_image"]
