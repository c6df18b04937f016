"""The notebook widgets without a browser: the OCR panel runs, shows its busy state, and survives bad input."""

from __future__ import annotations

import datetime

import pytest

from utils.evaluation.pages import sample_pages
from utils.notebook.widgets import ocr_app, precision_widget


def _controls(app):
    controls, preview = app.children[0].children
    return {"page": controls.children[0].children[0], "upload": controls.children[0].children[1],
            "clear": controls.children[0].children[2], "prompt": controls.children[1],
            "precision": controls.children[2], "budget": controls.children[6], "run": controls.children[7],
            "preview": preview, "text": app.children[1], "result": app.children[2]}


def _printed(output) -> str:
    return "".join(item.get("text", "") for item in output.outputs)


def _shown(output) -> str:
    return "".join(item.get("data", {}).get("text/html", "") for item in output.outputs)


@pytest.fixture
def app(tiny_ir):
    return ocr_app(*tiny_ir, sample_pages()[:2], device="CPU", max_new_tokens=8)


def _upload(widget, content: bytes) -> None:
    widget.value = ({"name": "page.png", "type": "image/png", "size": len(content), "content": memoryview(content),
                     "last_modified": datetime.datetime.now(datetime.timezone.utc)},)


def test_precision_widget_offers_exact_f32_first():
    widget = precision_widget()
    assert widget.value == "f32" and [value for _, value in widget.options] == ["f32", "default"]


def test_panel_previews_the_page_reads_it_and_is_usable_again(app, tiny_ir):
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    controls = _controls(app)
    assert bytes(controls["preview"].value).startswith(b"\x89PNG")
    first = controls["preview"].value
    controls["page"].value = 1
    assert controls["preview"].value != first
    controls["run"].click()
    expected = SpeculativeOcrPipeline(tiny_ir[0], device="CPU", precision="f32").generate(
        sample_pages()[1].image, max_new_tokens=8)
    assert _printed(controls["text"]) == expected.texts[0]  # streamed piece by piece
    assert "identical" in _shown(controls["result"]) and "dspark-steps" in _shown(controls["result"])
    assert "error" not in _printed(controls["result"])
    assert controls["run"].description == "Read the page" and not controls["run"].disabled


def test_bad_upload_and_empty_prompt_give_messages_and_clear_restores_the_page(app):
    controls = _controls(app)
    _upload(controls["upload"], b"this is not an image")
    assert "not an image" in _printed(controls["result"])
    controls["run"].click()
    assert "error: " in _printed(controls["result"]) and "not an image" in _printed(controls["result"])
    assert not controls["clear"].disabled
    controls["clear"].click()
    assert controls["upload"].value == () and controls["clear"].disabled
    assert bytes(controls["preview"].value).startswith(b"\x89PNG")
    controls["prompt"].value = "  "
    controls["run"].click()
    assert "prompt is empty" in _printed(controls["result"])
    assert not controls["run"].disabled
