"""The notebook widgets without a browser: the OCR panel runs, shows its busy state, and survives bad input."""

from __future__ import annotations

import datetime

import pytest

from utils.evaluation.character_error_rate import character_error_rate
from utils.pages.reading_pages import sample_pages
from utils.pages.typewriter import joined_reading
from utils.notebook.widgets import ocr_app, precision_widget

_TEXT = "white-space:pre-wrap;font-family:monospace"  # the style of every compared text


def _controls(app) -> dict:
    """The panel's widgets by their `dspark-*` CSS class (what the browser test finds them by)."""
    found, stack = {}, [app]
    while stack:
        widget = stack.pop()
        found |= {name.removeprefix("dspark-"): widget for name in getattr(widget, "_dom_classes", ())
                  if name.startswith("dspark-")}
        stack.extend(getattr(widget, "children", ()))
    return found


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
    cer = character_error_rate([(joined_reading(expected.texts), joined_reading([sample_pages()[1].text]))])
    assert f"dspark-cer'>{cer:.1%}<" in _shown(controls["result"])  # the page's own text beside the reading
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


def _upload_pdf(widget, content: bytes) -> None:
    widget.value = ({"name": "doc.pdf", "type": "application/pdf", "size": len(content),
                     "content": memoryview(content), "last_modified": datetime.datetime.now(datetime.timezone.utc)},)


def test_every_control_is_disabled_while_a_page_is_read_and_enabled_after(app):
    controls = _controls(app)
    inputs = [controls[name] for name in ("source", "page", "prompt", "precision", "budget", "run")]
    seen = []
    controls["text"].observe(lambda _: seen.append([widget.disabled for widget in inputs]), names="outputs")
    controls["run"].click()
    assert seen and all(all(states) for states in seen)  # every streamed piece arrived with the controls off
    assert not any(widget.disabled for widget in inputs)
    assert controls["typed"].disabled and controls["upload"].disabled and controls["clear"].disabled  # not chosen


def test_only_the_chosen_input_is_enabled_and_read(app, tiny_ir):
    """The "Read:" toggle says which input is read; the other inputs are disabled and keep what they hold. Typed
    text read while the Page dropdown still said "prose", and a blank box silently read the sample page."""
    from utils.pages.typewriter import typed_page
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    controls = _controls(app)
    enabled = lambda: {name for name in ("page", "typed", "upload") if not controls[name].disabled}  # noqa: E731
    assert controls["source"].value == "sample" and enabled() == {"page"}
    assert "Only the input chosen here is read" in controls["rule"].value
    controls["typed"].value = "abc"  # typing chooses the typed text
    assert controls["source"].value == "typed" and enabled() == {"typed"} and controls["page"].disabled
    typed_preview = controls["preview"].value
    assert typed_preview
    controls["source"].value = "sample"  # the typed text stays, unread
    assert enabled() == {"page"} and controls["typed"].value == "abc" and controls["preview"].value != typed_preview
    controls["run"].click()
    target_only = SpeculativeOcrPipeline(tiny_ir[0], device="CPU", precision="f32")
    assert _printed(controls["text"]) == target_only.generate(sample_pages()[0].image, max_new_tokens=8).texts[0]
    controls["source"].value = "typed"
    controls["run"].click()
    assert _printed(controls["text"]) == target_only.generate(typed_page("abc"), max_new_tokens=8).texts[0]
    controls["typed"].value = "   "
    assert controls["source"].value == "typed" and controls["preview"].value == b""
    controls["run"].click()
    assert _printed(controls["text"]) == ""  # nothing read, not the sample page
    assert _printed(controls["result"]) == ("error: the text box is empty: type the text to read, or choose another "
                                            "input after Read:\n")
    controls["source"].value = "upload"
    assert enabled() == {"upload"} and controls["clear"].disabled  # nothing uploaded yet
    controls["run"].click()
    assert "error: nothing is uploaded" in _printed(controls["result"]) and _printed(controls["text"]) == ""


def test_an_error_line_goes_when_the_input_or_a_setting_changes(app):
    """An error line stayed after the input was fixed, until Read was pressed again."""
    controls = _controls(app)
    _upload(controls["upload"], b"this is not an image")
    assert "not an image" in _printed(controls["result"])
    controls["typed"].value = "abc"
    assert _printed(controls["result"]) == ""
    controls["source"].value = "upload"
    assert "not an image" in _printed(controls["result"])
    controls["source"].value = "sample"  # a sample page chosen
    assert _printed(controls["result"]) == ""
    controls["prompt"].value = " "
    controls["run"].click()
    assert "prompt is empty" in _printed(controls["result"])
    controls["prompt"].value = "Text Recognition:"
    assert _printed(controls["result"]) == ""


def test_a_reading_goes_when_the_input_changes_and_an_empty_input_shows_no_preview(app):
    """A reading of one input stayed under another chosen after it (a PDF's pages under typed text), and an empty
    input showed a broken-image icon in the preview."""
    controls = _controls(app)
    controls["run"].click()
    assert "Speculative vs target only" in _shown(controls["result"]) and _printed(controls["text"])
    controls["source"].value = "typed"  # the text box is empty: nothing to preview, nothing read yet
    assert controls["result"].outputs == () and controls["text"].outputs == ()
    assert controls["preview"].layout.display == "none"
    controls["typed"].value = "Totally different text"
    assert controls["preview"].layout.display is None and bytes(controls["preview"].value).startswith(b"\x89PNG")


def test_the_markov_head_can_be_turned_off_to_draft_as_dflash_does(app, monkeypatch):
    """"off" drafts each block position's own best token (the per-position argmax), as `--markov-head off` does."""
    from utils.engine.draft import PER_POSITION_ARGMAX
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    asked, generate = [], SpeculativeOcrPipeline.generate

    def recording(pipeline, *args, **kwargs):
        asked.append(kwargs.get("markov_head_top_k"))
        return generate(pipeline, *args, **kwargs)

    monkeypatch.setattr(SpeculativeOcrPipeline, "generate", recording)
    controls = _controls(app)
    assert [label for label, _ in controls["markov"].options] == ["Top-K scorer", "dense walk", "off"]
    controls["markov"].value = PER_POSITION_ARGMAX
    controls["run"].click()
    assert "Speculative vs target only" in _shown(controls["result"]) and PER_POSITION_ARGMAX in asked


def test_any_error_is_one_line_in_the_panel_and_its_traceback_goes_to_the_log(app, monkeypatch, capfd):
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    def fail(*_args, **_kwargs):
        raise RuntimeError("Exception from the GPU plugin: device lost\ncheck the driver")

    monkeypatch.setattr(SpeculativeOcrPipeline, "generate", fail)
    controls = _controls(app)
    controls["run"].click()
    shown = _printed(controls["result"])
    assert shown == "error: RuntimeError: Exception from the GPU plugin: device lost (the traceback is in the " \
                    "server's log)\n"
    assert "Traceback" in capfd.readouterr().err
    assert not controls["run"].disabled and controls["run"].description == "Read the page"


def test_an_uploaded_pdf_is_previewed_and_read_page_by_page(app, tmp_path):
    from pdfs import pdf_of_images

    pages = sample_pages()
    controls = _controls(app)
    _upload_pdf(controls["upload"], pdf_of_images([pages[0].image, pages[1].image], tmp_path / "doc.pdf").read_bytes())
    assert bytes(controls["preview"].value).startswith(b"\x89PNG") and not controls["clear"].disabled
    controls["run"].click()
    printed, shown = _printed(controls["text"]), "".join(
        item.get("data", {}).get("text/markdown", "") for item in controls["result"].outputs)
    assert printed.index("--- page 1 of 2 ---") < printed.index("--- page 2 of 2 ---")
    assert shown.index("Page 1 of 2") < shown.index("Page 2 of 2")
    assert _shown(controls["result"]).count("dspark-verdict") == 2


def test_a_broken_pdf_upload_is_a_message(app):
    controls = _controls(app)
    _upload_pdf(controls["upload"], b"%PDF-1.7\nnothing else")
    assert "error: doc.pdf is not a readable PDF" in _printed(controls["result"])


def test_the_preview_keeps_the_pages_aspect_ratio(app):
    layout = _controls(app)["preview"].layout
    assert (layout.height, layout.object_fit, layout.align_self) == ("auto", "contain", "flex-start")


@pytest.mark.parametrize("environ, missing", [({"DSPARK_OCR_TARGET": "t"}, "DSPARK_OCR_DRAFT"),
                                              ({"DSPARK_OCR_DRAFT": "d"}, "DSPARK_OCR_TARGET")])
def test_the_app_refuses_half_a_pair_of_environment_variables(environ, missing, capfd):
    from utils.notebook.app import app_pair, speculative_ocr_app

    with pytest.raises(ValueError, match=f"is set but {missing} is not"):
        app_pair(environ)
    page = speculative_ocr_app(sample_pages()[:1], environ=environ)
    assert f"is set but {missing} is not" in page.value and "dspark-startup-error" in page._dom_classes


def test_the_app_runs_the_pair_the_environment_names(tiny_ir):
    from utils.notebook.app import app_pair

    assert app_pair({"DSPARK_OCR_TARGET": str(tiny_ir[0]), "DSPARK_OCR_DRAFT": str(tiny_ir[1])}) == tiny_ir


def test_a_typed_page_is_drawn_previewed_read_and_scored(app, tiny_ir):
    """Text typed in the box becomes the tiny pair's typewriter page: previewed, read as that image is read, and
    shown beside its own text with the CER (against the text typed, not the page's padded grid); a character outside
    the font is one line in the panel."""
    import io

    from PIL import Image

    from utils.pages.typewriter import render_typewriter_page, typed_lines
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    controls = _controls(app)
    controls["typed"].value = "x = 1\ny = [2, 3]"
    lines = typed_lines(controls["typed"].value)
    assert Image.open(io.BytesIO(bytes(controls["preview"].value))).size == render_typewriter_page(lines).size
    controls["run"].click()
    expected = SpeculativeOcrPipeline(tiny_ir[0], device="CPU", precision="f32").generate(
        render_typewriter_page(lines), max_new_tokens=8)
    assert _printed(controls["text"]) == expected.texts[0]
    cer = character_error_rate([(joined_reading(expected.texts), controls["typed"].value)])  # not the padded grid
    assert f"dspark-cer'>{cer:.1%}<" in _shown(controls["result"])
    assert f"dspark-page-text' style='{_TEXT}'>x = 1\ny = [2, 3]<" in _shown(controls["result"])
    assert "--- page" not in _printed(controls["text"]) and "dspark-joined" not in _shown(controls["result"])
    controls["typed"].value = "caf\u00e9\n" * 7
    assert "the tiny pair's font has printable ASCII only; remove '\u00e9'" in _printed(controls["result"])


def test_a_text_longer_than_a_page_is_read_page_by_page_and_joined(app, tiny_ir, paragraph):
    """A 20-line paragraph is 4 typed pages: previewed from the first, each read as its image is read, scored
    against its own text, and the 4 readings joined (`joined_reading`) beside the typed rows, with the CER."""
    import html
    import io

    from PIL import Image

    from utils.pages.typewriter import page_text, typed_pages, typed_pages_lines
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    controls = _controls(app)
    controls["typed"].value = paragraph
    pages, images = typed_pages_lines(paragraph), typed_pages(paragraph)
    assert len(pages) == 4
    assert Image.open(io.BytesIO(bytes(controls["preview"].value))).tobytes() == images[0].tobytes()
    descriptions = []
    controls["run"].observe(lambda change: descriptions.append(change["new"]), names="description")
    controls["run"].click()
    target_only = SpeculativeOcrPipeline(tiny_ir[0], device="CPU", precision="f32")
    readings = [target_only.generate(image, max_new_tokens=8).texts[0] for image in images]
    printed, shown = _printed(controls["text"]), _shown(controls["result"])
    assert printed == "".join(f"--- page {number} of 4 ---\n{reading}\n"
                              for number, reading in enumerate(readings, start=1))
    assert [text for text in descriptions if text.startswith("Reading page")] == [
        f"Reading page {number} of 4..." for number in range(1, 5)]
    assert controls["run"].description == "Read the page" and not controls["run"].disabled
    assert shown.count("dspark-verdict") == 2 * 4 + 1  # per page: identical?, CER; then the joined reading's CER
    for lines in pages:
        assert f"dspark-page-text' style='{_TEXT}'>{html.escape(joined_reading([page_text(lines)]))}<" in shown
    joined = shown[shown.index("dspark-joined"):]
    assert "read as 4 pages and joined" in joined
    assert f"dspark-page-text' style='{_TEXT}'>{html.escape(paragraph)}<" in joined
    assert f"dspark-read' style='{_TEXT}'>{html.escape(joined_reading(readings))}<" in joined
    cer = character_error_rate([(joined_reading(readings), paragraph)])
    assert f"dspark-cer'>{cer:.1%}<" in joined


def test_the_app_says_it_prepares_the_models_and_leaves_no_progress_bar_above_itself(tiny_ir):
    """The app's notebook run in a kernel as Voila runs it, with a first start's export stood in for by a progress
    bar: the page said nothing for about 100 s and kept "export target: 100%" above the app. The line `PREPARING`
    shows once its cell has run, before the app's cell prepares the models; then it is hidden, and the page holds
    no output of the preparation."""
    import nbformat
    from nbclient import NotebookClient

    from utils.models import REPO_ROOT
    from utils.notebook.app import PREPARING

    app = REPO_ROOT / "app" / "speculative-ocr.ipynb"
    notebook = nbformat.read(app, as_version=4)
    stand_in = nbformat.v4.new_code_cell(
        f"import sys\nsys.path.insert(0, {str(REPO_ROOT)!r})\nimport utils.models\nfrom tqdm.auto import tqdm\n\n"
        f"def exported(models=None):\n    for _ in tqdm(range(4), desc='export target'):\n        pass\n"
        f"    print('exported')\n    return {tuple(map(str, tiny_ir))!r}\n\nutils.models.default_ir_pair = exported")
    notebook.cells.insert(0, stand_in)
    notebook.cells.append(nbformat.v4.new_code_cell("print(repr(notice.value), notice.layout.display)"))
    client = NotebookClient(notebook, timeout=300, resources={"metadata": {"path": str(app.parent)}})
    shown = []
    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            client.execute_cell(cell, index)
            if "preparing_notice" in cell.source:  # the notice cell has run: the app's cell comes next
                shown = [output.get("data", {}).get("text/plain", "") for output in cell.outputs]
    assert any(PREPARING in text for text in shown)
    app_cell = next(cell for cell in notebook.cells if "speculative_ocr_app(" in cell.source)
    assert [output["data"]["text/plain"][:5] for output in app_cell.outputs] == ["VBox("]  # the app, nothing else
    assert "export target" not in str(app_cell.outputs) and "exported" not in str(app_cell.outputs)
    assert notebook.cells[-1].outputs[0]["text"] == "'' none\n"  # the notice is hidden


def test_the_readmes_voila_command_culls_closed_pages_kernels_and_renders_progressively_as_binder_does():
    """Every page load started a kernel that never stopped; the README's command and Binder's settings now cull a
    kernel no page is connected to, and show each cell's output as it runs (the "preparing" line)."""
    from voila_settings import as_settings, binder_settings, readme_voila_options

    readme = as_settings(readme_voila_options())
    culling = readme["MappingKernelManager"]
    assert culling["cull_idle_timeout"] > 0 and culling["cull_interval"] > 0
    assert readme["VoilaConfiguration"]["progressive_rendering"] is True
    binder = binder_settings()
    assert binder["MappingKernelManager"].pop("cull_connected") is False  # an open page keeps its kernel
    assert binder == readme
