"""The Voila app (`app/speculative-ocr.ipynb`): which pair it runs, a line while it prepares the models, and a page
that says why when it cannot start.

The app runs the shipped tiny pair, or the exported folders that `DSPARK_OCR_TARGET` and `DSPARK_OCR_DRAFT`
name. Both or neither: one of them alone is a mistake the page reports, not a silent fall-back to the tiny pair.
Preparing the tiny pair may export it (on a first start, about a minute and a half here): the notebook shows
`preparing_notice` in a cell of its own, which Voila renders before the app's cell runs (with
`--VoilaConfiguration.progressive_rendering=True`, as the README's command and `.binder/` set it), and the app
hides it when ready. What the preparation prints (the export's progress bars) never reaches the page.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["TARGET_VARIABLE", "DRAFT_VARIABLE", "PREPARING", "app_pair", "preparing_notice", "speculative_ocr_app"]

TARGET_VARIABLE, DRAFT_VARIABLE = "DSPARK_OCR_TARGET", "DSPARK_OCR_DRAFT"
PREPARING = "preparing the models ..."


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


def preparing_notice():
    """The line `PREPARING`, to show above the app until `speculative_ocr_app(notice=...)` has the models ready."""
    import ipywidgets as widgets

    notice = widgets.HTML(f"<p>{html.escape(PREPARING)}</p>")
    notice.add_class("dspark-preparing")
    return notice


def speculative_ocr_app(pages=None, *, environ: Mapping[str, str] | None = None, notice=None):
    """The app's page: the OCR panel, or one line saying why it cannot start (the traceback goes to the log).

    Args:
        pages: the sample pages to offer (default: `utils.pages.reading_pages.sample_pages()`).
        environ: where to read the two variables (default: `os.environ`).
        notice: the `preparing_notice` shown meanwhile, hidden once the models are ready (or have failed).
    """
    import ipywidgets as widgets
    from IPython.utils.capture import capture_output

    from utils.pages.reading_pages import sample_pages
    from utils.notebook.widgets import error_message, ocr_app

    try:
        with capture_output(display=True):  # an export's progress bars and lines, kept out of the page
            target, draft = app_pair(os.environ if environ is None else environ)
        return ocr_app(target, draft, sample_pages() if pages is None else pages)
    except Exception as error:  # noqa: BLE001 - the page shows any error as a message, never a traceback
        message = widgets.HTML(f"<pre>{html.escape(error_message(error))}</pre>")
        message.add_class("dspark-startup-error")
        return message
    finally:
        if notice is not None:
            notice.value, notice.layout.display = "", "none"
