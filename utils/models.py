"""Where the suite keeps its model folders, and the default pair: tiny, distilled, exported once and reused.

Layout below the models folder (`<repo>/models`, or $DSPARK_OCR_MODELS):
    tiny/             the tiny pair (`utils.tiny.default_pair`): target/ and draft/ in transformers layout
    tiny-ov/          their IR exports: target/ and draft/, plus the build stamp of the pair they came from

A change of the tiny pair (new builder, other options) makes its exports stale; they are then re-exported.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["REPO_ROOT", "models_dir", "default_ir_pair"]

REPO_ROOT = Path(__file__).resolve().parent.parent
_EXPORT_STAMP = "source-pair.json"


def models_dir() -> Path:
    """The suite's models folder: $DSPARK_OCR_MODELS, or `models/` at the repository root."""
    return Path(os.environ.get("DSPARK_OCR_MODELS", REPO_ROOT / "models"))


def default_ir_pair(models: Path | str | None = None) -> tuple[Path, Path]:
    """(target IR folder, draft IR folder) of the default tiny pair, building and exporting what is missing.

    Args:
        models: the models folder (default: `models_dir()`).
    """
    from utils.export.draft import export_draft
    from utils.export.target import export_target
    from utils.tiny import BUILD_STAMP, default_pair

    models = Path(models) if models is not None else models_dir()
    pair = default_pair(models)
    exports = models / "tiny-ov"
    source_stamp = (pair.root / BUILD_STAMP).read_text()
    stale = (exports / _EXPORT_STAMP).is_file() and (exports / _EXPORT_STAMP).read_text() != source_stamp
    target, draft = exports / "target", exports / "draft"
    if stale or not draft.exists():
        export_draft(pair.draft, draft, overwrite=True)
    if stale or not target.exists():
        export_target(pair.target, target, draft=pair.draft, overwrite=True)
    (exports / _EXPORT_STAMP).write_text(source_stamp)
    return target, draft
