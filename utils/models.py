"""Where the suite keeps its model folders, and the default pair's IR: shipped beside it, or exported once and reused.

The default pair itself ships in the repository (`utils/tiny/default`, `utils.tiny.default_pair`), and so does its
fp32 IR (`utils/tiny/default/ov`, `SHIPPED_IR_DIR`, written by `python -m utils.models --ship-ir`): a fresh clone
reads a page without torch and without exporting. Layout below the models folder (`<repo>/models`, or
$DSPARK_OCR_MODELS):
    tiny-ov/          the pair's IR exported here when the shipped IR is not of these files and this exporter (a
                      retrained pair, a new IR format) or when $DSPARK_OCR_FRESH_EXPORT is set: target/ and draft/
    compiled/         OpenVINO's model cache (`compiled_cache_dir`): archive workers import what was compiled before
    MiniCPM-OCR-1.0/, MiniCPM-OCR-1.0-DSpark/   the real checkpoints, when downloaded

Every export goes through `export_once`, which keys it by what it was made from, never by a folder existing: the
SHA-256 of each source file (and of the draft a target is sized by), the weight format and the exporter's IR format
(`IR_FORMAT_VERSION`, `DRAFT_IR_FORMAT_VERSION`). A retrained pair or a new exporter therefore never meets a stale IR.
The shipped IR carries the same stamp and is read only when it equals the stamp of the files beside it.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
from pathlib import Path

from utils.contract import DRAFT_IR_FORMAT_VERSION, IR_FORMAT_VERSION

__all__ = ["REPO_ROOT", "REAL_TARGET_ID", "REAL_DRAFT_ID", "SHIPPED_IR_DIR", "FRESH_EXPORT_VARIABLE", "models_dir",
           "shown_path", "compiled_cache_dir", "export_once", "default_ir_pair", "tiny_pair_ir", "ship_default_ir",
           "derived_ir_folder", "current_target_export", "current_draft_export",
           "download_real_pair",
           "hub_unreachable_reason", "real_ir_pair", "missing_target_files", "missing_draft_files"]

REPO_ROOT = Path(__file__).resolve().parent.parent
REAL_TARGET_ID = "openbmb/MiniCPM-OCR-1.0"
REAL_DRAFT_ID = "openbmb/MiniCPM-OCR-1.0-DSpark"
EXPORT_STAMP = "export-source.json"  # in each export folder: what `export_once` made it from
SHIPPED_IR_DIR = REPO_ROOT / "utils" / "tiny" / "default" / "ov"  # the shipped pair's IR: target/ and draft/
FRESH_EXPORT_VARIABLE = "DSPARK_OCR_FRESH_EXPORT"  # set (not "0"): `default_ir_pair` exports, ignoring SHIPPED_IR_DIR


def models_dir() -> Path:
    """The suite's models folder: $DSPARK_OCR_MODELS, or `models/` at the repository root."""
    return Path(os.environ.get("DSPARK_OCR_MODELS", REPO_ROOT / "models"))


def shown_path(path: Path | str) -> str:
    """`path` as a notebook prints it: below `<models>` (the same wherever $DSPARK_OCR_MODELS points), or relative to
    the repository, never the machine's own absolute path (which says nothing to a reader on another machine)."""
    path = Path(path).resolve()
    for root, name in ((models_dir().resolve(), "<models>"), (REPO_ROOT, None)):  # the models folder may be inside
        if path.is_relative_to(root):
            relative = path.relative_to(root).as_posix()
            return f"{name}/{relative}" if name else relative
    return f".../{path.name}"


def compiled_cache_dir(models: Path | str | None = None) -> Path:
    """OpenVINO's model cache below the models folder: compiled models kept between runs (keyed by OpenVINO on
    the IR, the device and the properties), so that each archive worker starts by importing, not compiling."""
    return (Path(models) if models is not None else models_dir()) / "compiled"


def _source_files(folder: Path) -> dict[str, str]:
    from utils.files import sha256_file

    return {path.relative_to(folder).as_posix(): sha256_file(path)
            for path in sorted(folder.rglob("*")) if path.is_file()}


def _export_stamp(kind: str, source: Path, *, draft: Path | None, weight_format: str) -> dict:
    """What an export of `source` (sized by `draft`, for a target) by this exporter is stamped with."""
    stamp = {"kind": kind, "weight_format": weight_format, "source": _source_files(source),
             "ir_format": IR_FORMAT_VERSION if kind == "target" else DRAFT_IR_FORMAT_VERSION}
    if kind == "target":
        stamp["draft"] = _source_files(draft) if draft is not None else None
    return stamp


def _holds(out: Path, stamp: dict) -> bool:
    """Whether the folder `out` holds the export `stamp` describes."""
    stamp_path = out / EXPORT_STAMP
    return stamp_path.is_file() and json.loads(stamp_path.read_text()) == stamp


def export_once(kind: str, source: Path | str, out: Path | str, *, draft: Path | str | None = None,
                weight_format: str = "fp32") -> Path:
    """Exports a target or a draft folder to `out`, unless `out` holds an export of these very files.

    The export is stamped (`EXPORT_STAMP`, inside `out`) with the SHA-256 of every source file, of the draft's
    files for a target, the weight format and the exporter's IR format; any change exports again, over `out`.

    Args:
        kind: "target" (`utils.export.target.export_target`) or "draft" (`utils.export.draft.export_draft`).
        source: the transformers folder to export.
        out: the IR folder.
        draft: for a target, the draft folder that sizes its language model.
        weight_format: "fp32", "fp16", "int8" or "int4".
    """
    if kind not in ("target", "draft"):
        raise ValueError(f"kind must be 'target' or 'draft', not {kind!r}")
    source, out = Path(source), Path(out)
    stamp = _export_stamp(kind, source, draft=Path(draft) if draft is not None else None, weight_format=weight_format)
    if _holds(out, stamp):
        return out
    from utils.export.draft import export_draft
    from utils.export.target import export_target

    if kind == "target":
        export_target(source, out, draft=draft, weight_format=weight_format, overwrite=True)
    else:
        export_draft(source, out, weight_format=weight_format, overwrite=True)
    (out / EXPORT_STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    return out


def _fresh_exports_asked() -> bool:
    return os.environ.get(FRESH_EXPORT_VARIABLE, "") not in ("", "0")


def _pair_stamps(pair) -> dict[str, dict]:
    """{"target": stamp, "draft": stamp} of the fp32 exports of `pair` (a `utils.tiny.TinyPair`) by this exporter."""
    return {"target": _export_stamp("target", pair.target, draft=pair.draft, weight_format="fp32"),
            "draft": _export_stamp("draft", pair.draft, draft=None, weight_format="fp32")}


def default_ir_pair(models: Path | str | None = None) -> tuple[Path, Path]:
    """(target IR folder, draft IR folder) of the shipped tiny pair: the shipped IR (`SHIPPED_IR_DIR`) when it is
    stamped as an export of the shipped files by this exporter, else exported once into the models folder.

    The shipped IR is read without torch and without exporting. An IR made from other files or by another IR format
    (a retrained pair, a new exporter) is never read: the pair is exported into `<models>/tiny-ov`, saying so in one
    line on stderr, and reused there until it changes again. $DSPARK_OCR_FRESH_EXPORT (`FRESH_EXPORT_VARIABLE`)
    exports there whatever the shipped IR (CI runs the notebooks on fresh exports too). Nothing is written into the
    repository's folders.

    Args:
        models: the models folder (default: `models_dir()`).
    """
    from utils.tiny import default_pair

    pair = default_pair()
    stamps = _pair_stamps(pair)
    fresh = _fresh_exports_asked()
    if not fresh and all(_holds(SHIPPED_IR_DIR / kind, stamp) for kind, stamp in stamps.items()):
        return SHIPPED_IR_DIR / "target", SHIPPED_IR_DIR / "draft"
    exports = (Path(models) if models is not None else models_dir()) / "tiny-ov"
    if not fresh and not all(_holds(exports / kind, stamp) for kind, stamp in stamps.items()):
        print(f"the shipped IR ({shown_path(SHIPPED_IR_DIR)}) is not an export of the tiny pair beside it by this "
              f"exporter: exporting the pair once into {shown_path(exports)} (rewrite the shipped IR with "
              "`python -m utils.models --ship-ir`)", file=sys.stderr)
    return _export_pair(pair.target, pair.draft, exports)


def _export_pair(target: Path, draft: Path, exports: Path) -> tuple[Path, Path]:
    """(target IR, draft IR) of a target folder and its draft, exported once (fp32) into `exports`/target and /draft."""
    draft_ir = export_once("draft", draft, exports / "draft")
    return export_once("target", target, exports / "target", draft=draft), draft_ir


def ship_default_ir(out: Path | str = SHIPPED_IR_DIR) -> Path:
    """(Re)writes the shipped pair's fp32 IR, stamped, into `out` (target/ and draft/), replacing it whole only
    when both exports succeeded. Run after the pair is rebuilt or the exporter's IR format changes
    (`python -m utils.models --ship-ir`, docs/tiny-pair.md)."""
    from utils.contract import TARGET_MANIFEST
    from utils.files import atomic_directory
    from utils.tiny import default_pair

    pair = default_pair()
    with atomic_directory(out, overwrite=True) as staging:
        _export_pair(pair.target, pair.draft, staging)
        report = staging / "target" / TARGET_MANIFEST  # what is machine-bound in it: absolute paths, the export's time
        described = json.loads(report.read_text()) | {"source": shown_path(pair.target), "draft": shown_path(pair.draft)}
        described.pop("export_seconds")
        report.write_text(json.dumps(described, indent=2) + "\n")
    return Path(out)


def derived_ir_folder(source: Path | str, suffix: str, models: Path | str | None = None) -> Path:
    """Where a folder made from the IR folder `source` (a compressed copy, rounded weights) goes: beside it,
    `<name>-<suffix>`, or, for the shipped IR (never written into at run time), in the models folder's `tiny-ov/`,
    where its exports go.

    Args:
        source: an exported target or draft folder.
        suffix: what the folder holds: "int8", "int4", "bf16-weights".
        models: the models folder (default: `models_dir()`).
    """
    source = Path(source)
    shipped = source.resolve().parent == SHIPPED_IR_DIR.resolve()
    parent = (Path(models) if models is not None else models_dir()) / "tiny-ov" if shipped else source.parent
    return parent / f"{source.name}-{suffix}"


def current_target_export(folder: Path | str) -> bool:
    """Whether `folder` holds a target export that this code reads: its language-model config names this
    `IR_FORMAT_VERSION` (an export by older code is exported again, not read)."""
    from utils.contract import LANGUAGE_MODEL_CONFIG

    path = Path(folder) / LANGUAGE_MODEL_CONFIG
    return path.is_file() and json.loads(path.read_text()).get("format_version") == IR_FORMAT_VERSION


def current_draft_export(folder: Path | str) -> bool:
    """Whether `folder` holds a draft backbone IR laid out as this code reads it (`DRAFT_IR_FORMAT_VERSION`)."""
    from utils.contract import DRAFT_MODEL, draft_cache_layout_is_current
    from utils.contract.core import openvino_core

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
    fp16), int8 and int4 (lm_head in int8). Exports of the same files are reused (`export_once`).

    Returns:
        (target IR folder, {draft weight format: draft IR folder}) below the models folder.
    """
    models = Path(models) if models is not None else models_dir()
    target_source, draft_source = download_real_pair(models)
    target = export_once("target", target_source, models / f"{target_source.name}-ov-{target_format}",
                         draft=draft_source, weight_format=target_format)
    drafts = {weight_format: export_once("draft", draft_source, models / f"{draft_source.name}-ov-{weight_format}",
                                         weight_format=weight_format) for weight_format in draft_formats}
    return target, drafts


def tiny_pair_ir(pair: Path | str, models: Path | str | None = None) -> tuple[Path, Path]:
    """(target IR folder, draft IR folder) of a tiny pair folder (`target/`, `draft/`, as `python -m utils.tiny`
    writes it), exported once into the models folder under the pair folder's name."""
    pair = Path(pair)
    exports = (Path(models) if models is not None else models_dir()) / f"{pair.resolve().name}-ov"
    return _export_pair(pair / "target", pair / "draft", exports)


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


def main(argv: list[str] | None = None) -> int:
    """`python -m utils.models --ship-ir [--out DIR]`: writes the shipped pair's IR (`ship_default_ir`)."""
    from utils.cli import command_parser

    parser = command_parser("utils.models", main.__doc__)
    parser.add_argument("--ship-ir", action="store_true", required=True,
                        help="export the shipped tiny pair to fp32 IR, stamped, into --out")
    parser.add_argument("--out", metavar="DIR", default=SHIPPED_IR_DIR, help="default: utils/tiny/default/ov")
    args = parser.parse_args(argv)
    print(f"shipped IR written to {shown_path(ship_default_ir(args.out))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
