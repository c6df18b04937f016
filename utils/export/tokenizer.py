"""The target's tokenizer -> openvino-tokenizers IR, loadable with `openvino_genai.Tokenizer(folder)`.

The HF tokenizer files, the chat template and the processor configs are written beside the IR, so the export
folder is complete for GenAI, for transformers and for the runtime's preprocessing (which reads the image-processor
settings, the token strings and the template from it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from utils.contract import DETOKENIZER_NAME, TOKENIZER_NAME
from utils.contract.processor import PROCESSOR_FILES

__all__ = ["export_tokenizer"]


def export_tokenizer(source: Path | str, out: Path | str) -> tuple[Path, Path]:
    """Converts the tokenizer of `source` (with its detokenizer) and writes it with the HF and processor files.

    Args:
        source: a model folder with the HF tokenizer (tokenizer.json, tokenizer_config.json, chat template) and
            processor_config.json or preprocessor_config.json.
        out: the export folder.

    Returns:
        The paths of the tokenizer and detokenizer IR.
    """
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer
    from transformers import AutoTokenizer

    out = Path(out)
    hf_tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer, detokenizer = convert_tokenizer(hf_tokenizer, with_detokenizer=True)
    out.mkdir(parents=True, exist_ok=True)
    hf_tokenizer.save_pretrained(out)
    for name in PROCESSOR_FILES:  # copied as they are (whichever the source has); `export_target` records its choice
        if (Path(source) / name).is_file():
            shutil.copyfile(Path(source) / name, out / name)
    paths = out / TOKENIZER_NAME, out / DETOKENIZER_NAME
    for model, path in zip((tokenizer, detokenizer), paths):
        ov.save_model(model, path)
    return paths
