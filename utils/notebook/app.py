"""The Voila app (`app/speculative-ocr.ipynb`): which pair it runs, and a page that says why when it cannot start.

The app runs the shipped tiny pair, or the exported folders that `DSPARK_OCR_TARGET` and `DSPARK_OCR_DRAFT`
name. Both or neither: one of them alone is a mistake the page reports, not a silent fall-back to the tiny pair.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["TARGET_VARIABLE", "DRAFT_VARIABLE", "app_pair", "speculative_ocr_app"]

TARGET_VARIABLE, DRAFT_VARIABLE = "DSPARK_OCR_TARGET", "DSPARK_OCR_DRAFT"


def app_pair(environ: Mapping[str, str]) -> tuple[Path, Path]:
    """The (target, draft) IR folders the environment names, or the shipped tiny pair's when it names neither."""
    target, draft = environ.get(TARGET_VARIABLE), environ.get(DRAFT_VARIABLE)
    if bool(target) != bool(draft):
        given, missing = (TARGET_VARIABLE, DRAFT_VARIABLE) if target else (DRAFT_VARIABLE, TARGET_VARIABLE)
        raise ValueError(f"{given} is set but {missing} is not: set both to exported IR folders, or neither "
                         "to run the shipped tiny pair")
    if target:
        return Path(target), Path(draft)
    from utils.models import default_ir_pair

    return default_ir_pair()


def speculative_ocr_app(pages=None, *, environ: Mapping[str, str] | None = None):
    """The app's page: the OCR panel, or one line saying why it cannot start (the traceback goes to the log).

    Args:
        pages: the sample pages to offer (default: `utils.pages.reading_pages.sample_pages()`).
        environ: where to read the two variables (default: `os.environ`).
    """
    import ipywidgets as widgets

    from utils.pages.reading_pages import sample_pages
    from utils.notebook.widgets import error_message, ocr_app

    try:
        target, draft = app_pair(os.environ if environ is None else environ)
        return ocr_app(target, draft, sample_pages() if pages is None else pages)
    except Exception as error:  # noqa: BLE001 - the page shows any error as a message, never a traceback
        message = widgets.HTML(f"<pre>{html.escape(error_message(error))}</pre>")
        message.add_class("dspark-startup-error")
        return message
