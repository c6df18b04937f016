"""Export of a MiniCPM-OCR target folder to the OpenVINO IR folder the speculative pipeline reads.

The folder holds:
    openvino_vision_embeddings_model.xml   vision tower + merger: one batch of same-size tiles -> image features
    openvino_text_embeddings_model.xml     input ids -> embeddings (the draft's block is embedded with it too)
    openvino_language_model_{prefill,decode,verify}.xml + openvino_language_model_config.json
                                           the text model with explicit state and rollback terms
    openvino_tokenizer.xml / openvino_detokenizer.xml + the HF tokenizer and processor files
    config.json, generation_config.json    copied from the source
    openvino_target_export.json            what was exported, from where, with which options

The image-processor settings that size a page (`downsample_mode`, `max_slice_nums`) are chosen at export
(`utils.export.processor_settings`: the files', the model card's recipe for openbmb/MiniCPM-OCR-1.0, or the
caller's), the vision IR is converted in that mode, and the choice is written into the folder's config.json and
processor files, so the runtime reads it with everything else (`utils.contract.target.ExportedTarget`).

The language model outputs the hidden states of the layers a draft reads, so the export needs the draft's
`target_layer_ids` (from `--draft`, or given explicitly).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path

from utils.contract import (DEFAULT_PREFILL_CHUNK, TARGET_MANIFEST, TEXT_EMBEDDINGS_NAME, VISION_EMBEDDINGS_NAME,
                            WEIGHT_FORMATS)
from utils.export.compression import save_ir
from utils.export.source_checks import check_text_config
from utils.files import atomic_directory

__all__ = ["export_target"]

# Copied from the source when present; the chat template files too, since a template that lives only there
# (not in tokenizer_config.json) would otherwise be lost, and with it the non-thinking switch.
_COPIED = ("config.json", "generation_config.json", "chat_template.jinja", "chat_template.json")


@contextlib.contextmanager
def _quiet_transformers():
    """Hides transformers' loading bar and its notes about the config's training fields (loss type): the export
    shows its own progress, and what it checks fails loudly."""
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def _check_source(source: Path) -> dict:
    path = source / "config.json"
    if not path.is_file():
        raise ValueError(f"{path}: not found; --model must be a MiniCPM-OCR folder (config.json, model.safetensors)")
    config = json.loads(path.read_text())
    if config.get("model_type") != "minicpm_ocr":
        raise ValueError(f"{path}: model_type={config.get('model_type')!r}, expected 'minicpm_ocr'")
    check_text_config(config, source=path)
    return config


def _layer_ids_and_verify_length(source: Path, draft: Path | None, hidden_layer_ids, verify_length
                                 ) -> tuple[list[int], int]:
    if draft is not None:
        from utils.checkpoint.draft import TargetSpec, check_draft_fits_target, load_draft_checkpoint

        checkpoint = load_draft_checkpoint(draft)
        check_draft_fits_target(checkpoint, TargetSpec.from_folder(source))
        config = checkpoint.config
        hidden_layer_ids = hidden_layer_ids or list(config.target_layer_ids)
        verify_length = verify_length or config.block_size + 1
    if not hidden_layer_ids:
        raise ValueError("the language model needs the draft's target layer ids: pass draft=DRAFT_FOLDER "
                         "(--draft) or hidden_layer_ids (--hidden-layer-ids)")
    return [int(i) for i in hidden_layer_ids], int(verify_length or 16)


def export_target(source: Path | str, out: Path | str, *, draft: Path | str | None = None,
                  hidden_layer_ids: list[int] | None = None, verify_length: int | None = None,
                  prefill_chunk: int = DEFAULT_PREFILL_CHUNK, weight_format: str = "fp32",
                  downsample_mode: str | None = None,
                  max_slice_nums: int | None = None, overwrite: bool = False) -> Path:
    """Exports a MiniCPM-OCR folder (tiny or `openbmb/MiniCPM-OCR-1.0`) to an IR folder, atomically.

    Args:
        source: the transformers folder.
        out: the IR folder to create.
        draft: a DSpark draft folder whose `target_layer_ids` and `block_size` size the language model.
        hidden_layer_ids: target layers whose outputs the language model returns (default: the draft's).
        verify_length: tokens per verification (default: the draft's block_size + 1, else 16).
        prefill_chunk: tokens per prefill call.
        weight_format: `fp32`, `fp16`, `int8` or `int4`: NNCF compresses each IR in memory before it is saved
            (INT4 for the language models with the lm_head in INT8; INT8 for everything else:
            `utils.export.compression`), so no fp32 copy is written.
        downsample_mode: "4x" or "16x" (default: the model card's recipe for openbmb/MiniCPM-OCR-1.0, else the
            checkpoint's own).
        max_slice_nums: the most slices of a page (default: as `downsample_mode`).
        overwrite: replace an existing `out`.

    Returns:
        `out`.
    """
    from tqdm.auto import tqdm
    from transformers import AutoModelForImageTextToText

    from utils.export.language_model import export_language_model
    from utils.export.processor_settings import choose_processor_settings, write_processor_settings
    from utils.export.tokenizer import export_tokenizer
    from utils.export.vision import convert_text_embeddings, convert_vision_embeddings

    source, out = Path(source), Path(out)
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format={weight_format!r} must be one of {WEIGHT_FORMATS}")
    _check_source(source)
    if out.exists() and not overwrite:  # fail before minutes of conversion, not after them
        raise FileExistsError(f"{out} already exists; pass overwrite=True to replace it")
    layer_ids, verify_length = _layer_ids_and_verify_length(source, draft and Path(draft), hidden_layer_ids,
                                                           verify_length)
    settings = choose_processor_settings(source, downsample_mode=downsample_mode, max_slice_nums=max_slice_nums)
    start = time.perf_counter()
    with _quiet_transformers():
        model = AutoModelForImageTextToText.from_pretrained(source, dtype="float32").eval()
    steps = [
        ("language model", lambda folder: export_language_model(
            model, folder, hidden_layer_ids=layer_ids, verify_length=verify_length, prefill_chunk=prefill_chunk,
            weight_format=weight_format)),
        ("vision", lambda folder: save_ir(convert_vision_embeddings(model, settings.downsample_mode),
                                          folder / VISION_EMBEDDINGS_NAME,
                                          weight_format=weight_format)),
        ("embeddings", lambda folder: save_ir(convert_text_embeddings(model), folder / TEXT_EMBEDDINGS_NAME,
                                              weight_format=weight_format)),
        ("tokenizer", lambda folder: export_tokenizer(source, folder)),
    ]
    with atomic_directory(out, overwrite=overwrite) as staging:
        for name, step in tqdm(steps, desc="export target", unit="part"):
            with _quiet_transformers():
                step(staging)
        for name in _COPIED:
            if (source / name).is_file():
                shutil.copy2(source / name, staging / name)
        write_processor_settings(staging, settings)
        manifest = {"source": str(source), "weight_format": weight_format, "hidden_layer_ids": layer_ids,
                    "verify_length": verify_length, "prefill_chunk": prefill_chunk,
                    "draft": None if draft is None else str(draft), "image_processor": settings.as_dict(),
                    "export_seconds": round(time.perf_counter() - start, 1)}
        (staging / TARGET_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return out
