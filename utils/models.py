"""Where the suite keeps its model folders, and the default pair's IR: exported once and reused.

The default pair itself ships in the repository (`utils/tiny/default`, `utils.tiny.default_pair`). Layout
below the models folder (`<repo>/models`, or $DSPARK_OCR_MODELS):
    tiny-ov/          its IR exports: target/ and draft/, plus the manifest of the pair they came from
    compiled/         OpenVINO's model cache (`compiled_cache_dir`): archive workers import what was compiled before
    MiniCPM-OCR-1.0/, MiniCPM-OCR-1.0-DSpark/   the real checkpoints, when downloaded

A change of the shipped pair (other files, so another manifest) or of the exporter (`IR_FORMAT_VERSION`,
`DRAFT_IR_FORMAT_VERSION`) makes its exports stale; they are then re-exported.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from utils.contract import DRAFT_IR_FORMAT_VERSION, IR_FORMAT_VERSION

__all__ = ["REPO_ROOT", "REAL_TARGET_ID", "REAL_DRAFT_ID", "models_dir", "compiled_cache_dir", "default_ir_pair",
           "current_target_export", "current_draft_export",
           "download_real_pair",
           "hub_unreachable_reason", "real_ir_pair", "missing_target_files", "missing_draft_files"]

REPO_ROOT = Path(__file__).resolve().parent.parent
REAL_TARGET_ID = "openbmb/MiniCPM-OCR-1.0"
REAL_DRAFT_ID = "openbmb/MiniCPM-OCR-1.0-DSpark"
_EXPORT_STAMP = "source-pair.json"


def models_dir() -> Path:
    """The suite's models folder: $DSPARK_OCR_MODELS, or `models/` at the repository root."""
    return Path(os.environ.get("DSPARK_OCR_MODELS", REPO_ROOT / "models"))


def compiled_cache_dir(models: Path | str | None = None) -> Path:
    """OpenVINO's model cache below the models folder: compiled models kept between runs (keyed by OpenVINO on
    the IR, the device and the properties), so that each archive worker starts by importing, not compiling."""
    return (Path(models) if models is not None else models_dir()) / "compiled"


def default_ir_pair(models: Path | str | None = None) -> tuple[Path, Path]:
    """(target IR folder, draft IR folder) of the shipped tiny pair, exported once (again when it changed).

    Args:
        models: the models folder (default: `models_dir()`).
    """
    from utils.export.draft import export_draft
    from utils.export.target import export_target
    from utils.tiny import default_pair
    from utils.tiny.manifest import MANIFEST

    models = Path(models) if models is not None else models_dir()
    pair = default_pair()
    exports = models / "tiny-ov"
    source_stamp = ((pair.root / MANIFEST).read_text()
                    + f"\nIR format {IR_FORMAT_VERSION}, draft IR format {DRAFT_IR_FORMAT_VERSION}\n")
    stamp = exports / _EXPORT_STAMP
    stale = not stamp.is_file() or stamp.read_text() != source_stamp
    target, draft = exports / "target", exports / "draft"
    if stale or not draft.exists():
        export_draft(pair.draft, draft, overwrite=True)
    if stale or not target.exists():
        export_target(pair.target, target, draft=pair.draft, overwrite=True)
    stamp.write_text(source_stamp)
    return target, draft


def current_target_export(folder: Path | str) -> bool:
    """Whether `folder` holds a target export that this code reads: its language-model config names this
    `IR_FORMAT_VERSION` (an export by older code is exported again, not read)."""
    import json

    from utils.contract import LANGUAGE_MODEL_CONFIG

    path = Path(folder) / LANGUAGE_MODEL_CONFIG
    return path.is_file() and json.loads(path.read_text()).get("format_version") == IR_FORMAT_VERSION


def current_draft_export(folder: Path | str) -> bool:
    """Whether `folder` holds a draft backbone IR laid out as this code reads it (`DRAFT_IR_FORMAT_VERSION`)."""
    from utils.contract import DRAFT_MODEL, draft_cache_layout_is_current
    from utils.engine.device import openvino_core

    path = Path(folder) / DRAFT_MODEL
    return path.is_file() and draft_cache_layout_is_current(openvino_core().read_model(path))


_PATTERNS = ("*.json", "*.safetensors", "*.jinja", "*.txt", "*.model")  # never pickles or remote code


def _probe(repo_id: str, *, timeout: float = 10.0):
    """(the repository's model info, None), or (None, one line saying why it cannot be fetched now)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, OfflineModeIsEnabled, RepositoryNotFoundError

    try:
        return HfApi().model_info(repo_id, timeout=timeout), None
    except GatedRepoError:
        return None, (f"{repo_id} is gated: accept its conditions on its model page, then log in "
                      f"(`hf auth login`) or set HF_TOKEN")
    except RepositoryNotFoundError:
        return None, f"{repo_id} does not exist, or is private and this login cannot see it"
    except OfflineModeIsEnabled:
        return None, f"{repo_id} cannot be fetched: offline mode is on (HF_HUB_OFFLINE)"
    except Exception as error:  # no network, DNS, proxy, timeout: the hub does not answer
        detail = (str(error).splitlines() or [""])[0][:160]
        return None, f"the model hub does not answer for {repo_id} ({type(error).__name__}: {detail})"


def _wanted(info) -> list[str]:
    """The repository's files the suite fetches (`_PATTERNS`), sorted."""
    return sorted(sibling.rfilename for sibling in info.siblings or ()
                  if any(fnmatch.fnmatch(sibling.rfilename, pattern) for pattern in _PATTERNS))


def download_real_pair(models: Path | str | None = None, *, report=print) -> tuple[Path, Path]:
    """Downloads the real target and draft (needs internet; huggingface_hub shows progress bars).

    Both repositories are probed before anything is fetched, so a missing, gated or unreachable one fails at once
    with one line each. Only safetensors, configs, tokenizer and JSON files are fetched (`_PATTERNS`): the suite
    never loads pickles or runs remote code. The files fetched are reported per repository.

    Args:
        models: the models folder (default: `models_dir()`).
        report: called with one line per repository: its files and folder.

    Returns:
        (target folder, draft folder) below the models folder.

    Raises:
        RuntimeError: one line per repository that cannot be fetched, before any download.
    """
    from huggingface_hub import snapshot_download

    models = Path(models) if models is not None else models_dir()
    probes = {repo_id: _probe(repo_id) for repo_id in (REAL_TARGET_ID, REAL_DRAFT_ID)}
    failures = [reason for _, reason in probes.values() if reason is not None]
    if failures:
        raise RuntimeError("cannot download the real pair:\n" + "\n".join(f"- {reason}" for reason in failures))
    folders = []
    for repo_id, (info, _) in probes.items():
        local = models / repo_id.split("/")[-1]
        folders.append(Path(snapshot_download(repo_id, local_dir=local, allow_patterns=list(_PATTERNS),
                                              revision=info.sha)))
        files = _wanted(info)
        report(f"{repo_id} -> {folders[-1]}: {len(files)} files: {', '.join(files)}")
    return folders[0], folders[1]


def hub_unreachable_reason(repo_id: str = REAL_TARGET_ID, *, timeout: float = 10.0) -> str | None:
    """Why the real checkpoints cannot be downloaded now, in one line, or None when the model hub answers.

    Args:
        repo_id: the repository to ask about.
        timeout: seconds to wait for the answer.
    """
    return _probe(repo_id, timeout=timeout)[1]


def real_ir_pair(models: Path | str | None = None, *, target_format: str = "int8",
                 draft_formats: tuple[str, ...] = ("fp16", "int8", "int4")) -> tuple[Path, dict[str, Path]]:
    """Downloads the real pair (needs internet) and exports the target and each draft format once.

    The defaults are the seed's validation: an int8 target, drafts in 16-bit (the published bf16, stored as
    fp16), int8 and int4 (lm_head in int8). Existing exports are reused.

    Returns:
        (target IR folder, {draft weight format: draft IR folder}) below the models folder.
    """
    from utils.export.draft import export_draft
    from utils.export.target import export_target

    models = Path(models) if models is not None else models_dir()
    target_source, draft_source = download_real_pair(models)
    target = models / f"{target_source.name}-ov-{target_format}"
    if not target.exists():
        export_target(target_source, target, draft=draft_source, weight_format=target_format)
    drafts = {}
    for weight_format in draft_formats:
        drafts[weight_format] = models / f"{draft_source.name}-ov-{weight_format}"
        if not current_draft_export(drafts[weight_format]):
            export_draft(draft_source, drafts[weight_format], weight_format=weight_format, overwrite=True)
    return target, drafts


def missing_target_files(folder: Path | str) -> list[str]:
    """Files an exported target folder lacks (empty when it is complete)."""
    from utils.contract import (DETOKENIZER_NAME, LANGUAGE_MODEL_CONFIG, LANGUAGE_MODEL_NAME, TEXT_EMBEDDINGS_NAME,
                                TOKENIZER_NAME, VISION_EMBEDDINGS_NAME)

    folder = Path(folder)
    expected = [VISION_EMBEDDINGS_NAME, TEXT_EMBEDDINGS_NAME, LANGUAGE_MODEL_NAME, LANGUAGE_MODEL_CONFIG,
                TOKENIZER_NAME, DETOKENIZER_NAME, "config.json", "generation_config.json"]
    expected += [name.replace(".xml", ".bin") for name in expected if name.endswith(".xml")]
    return [name for name in expected if not (folder / name).is_file()]


def missing_draft_files(folder: Path | str) -> list[str]:
    """Files an exported draft folder lacks (empty when it is complete)."""
    from utils.checkpoint.draft import LOCAL_TO_TARGET
    from utils.contract import DRAFT_MODEL, MARKOV_HEAD_MODEL

    expected = [DRAFT_MODEL, MARKOV_HEAD_MODEL, "config.json", LOCAL_TO_TARGET]
    expected += [name.replace(".xml", ".bin") for name in expected if name.endswith(".xml")]
    return [name for name in expected if not (Path(folder) / name).is_file()]
