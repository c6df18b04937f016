"""ipywidgets helpers for the notebooks (ipywidgets is imported inside, so `utils` stays light)."""

from __future__ import annotations

from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD
from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT

__all__ = ["device_widget", "precision_widget", "error_message", "ocr_app"]


def device_widget(default: str | None = None, *, extra: tuple[str, ...] = ("AUTO",)):
    """A dropdown of the OpenVINO devices on this machine; defaults to GPU when an Intel GPU is present.

    Args:
        default: the device to preselect (falls back to `utils.stack.default_device()` when absent).
        extra: virtual devices offered after the real ones.
    """
    import ipywidgets as widgets

    from utils.stack import default_device, list_devices

    devices = list_devices()
    options = [device for device, _ in devices] + [device for device in extra if device not in dict(devices)]
    value = default if default in options else default_device(devices)
    return widgets.Dropdown(options=options, value=value, description="Device:")


def precision_widget(default: str = "f32"):
    """A dropdown of the inference precisions (`utils.engine.device.PRECISIONS`): f32, exact, or the device's
    own (bf16 on CPUs that have it, f16 on GPUs), faster, where a near-tie may flip a token."""
    import ipywidgets as widgets

    options = [("f32 (exact)", "f32"), ("device default (bf16/f16)", "default")]
    return widgets.Dropdown(options=options, value=default, description="Precision:")


def error_message(error: BaseException) -> str:
    """One line for the page: a rejected input says what is wrong; anything else also names its type."""
    _log_traceback(error)
    if isinstance(error, (ValueError, FileNotFoundError)):
        return f"error: {error}"
    first_line = (str(error).strip().splitlines() or [""])[0]
    return f"error: {type(error).__name__}: {first_line} (the traceback is in the server's log)"


def _log_traceback(error: BaseException) -> None:
    """Writes the traceback to the process's own stderr: the Jupyter or Voila server's log, not the page."""
    import logging
    import sys

    logger = logging.getLogger("utils.notebook")
    if not logger.handlers:
        logger.addHandler(logging.StreamHandler(sys.__stderr__))
        logger.propagate = False
    logger.error("the OCR panel caught an error", exc_info=(type(error), error, error.__traceback__))


def ocr_app(target, draft, pages, *, device: str | None = None, default_prompt: str = DEFAULT_PROMPT,
            max_new_tokens: int = 512):
    """The interactive OCR panel of notebook 05 and of the Voila app (`app/speculative-ocr.ipynb`).

    Pick a sample page, type text (drawn as typewriter pages: what the tiny pair reads; a text longer than one page
    becomes several, `utils.pages.typewriter.typed_pages_lines`), or upload an image or a PDF (previewed, the
    first page; a button clears it), set the prompt, precision, draft tokens per step, Markov computation,
    confidence threshold and token budget, and press the button: each page is read in turn with the target alone
    and with the draft, and the panel shows the streamed text, both texts side by side with an "identical" mark, a
    sample or typed page's own text beside the reading with its character error rate, the per-step view and the
    metrics; the button counts the pages of a longer read ("Reading page 2 of 4..."), and a text typed over several
    pages ends with the pages' readings joined (`joined_reading`) beside the typed text's rows, with its CER. A
    target that reads only typewriter pages (the tiny pair) gets a line saying so above the controls, and a notice
    under a reading of any other image. The draft folder is read once here and the models compile on the first
    read. Every control is disabled while a read runs; any error becomes one line in the panel (the traceback goes
    to the server's log), and the panel stays usable. Every control carries a `dspark-*` CSS class, so a browser
    test can find it.

    Args:
        target: the target IR folder.
        draft: the draft IR folder (or its `utils.contract.draft.ExportedDraft`).
        pages: `utils.pages.reading_pages.sample_pages()`.
        device: the OpenVINO device; None adds a device dropdown to the panel.
        max_new_tokens: the token budget the panel starts with (the CLI's default: a whole page).
    """
    return _OcrPanel(target, draft, pages, device=device, default_prompt=default_prompt,
                     max_new_tokens=max_new_tokens).widget


class _OcrPanel:
    """`ocr_app`'s state: the controls, the pipelines compiled so far, and the handlers that tie them together."""

    def __init__(self, target, draft, pages, *, device: str | None, default_prompt: str, max_new_tokens: int):
        from utils.contract.draft import ExportedDraft

        self.target, self.draft, self.pages, self.device = target, ExportedDraft.of(draft), pages, device
        self._pipelines = {}  # (device, precision) -> (baseline, speculative), compiled on first use
        self._build_controls(default_prompt, max_new_tokens)
        self.page.observe(self.show_preview, names="value")
        self.typed.observe(self.show_preview, names="value")
        self.upload.observe(self.show_preview, names="value")
        self.clear.on_click(self.on_clear)
        self.run.on_click(self.on_run)
        self.show_preview()
        self.widget = self._layout()

    def _build_controls(self, default_prompt: str, max_new_tokens: int) -> None:
        """The panel's widgets, each with its `dspark-*` class."""
        import ipywidgets as widgets

        block_size, wide = self.draft.info.block_size, {"description_width": "initial"}
        self.devices = device_widget() if self.device is None else None
        self.page = widgets.Dropdown(options=[(p.name, index) for index, p in enumerate(self.pages)],
                                     description="Page:")
        self.typed = widgets.Textarea(placeholder="or type text here: 6 rows of 26 characters a page, a longer "
                                                  "text read page by page", rows=6,
                                      continuous_update=False, layout=widgets.Layout(width="260px"))
        self.upload = widgets.FileUpload(accept="image/*,.pdf,application/pdf", multiple=False, description="Upload")
        self.clear = widgets.Button(description="Clear upload", disabled=True)
        # The preview keeps the page's aspect ratio: no stretching to the height of the controls beside it.
        self.preview = widgets.Image(format="png", layout=widgets.Layout(
            max_width="420px", height="auto", align_self="flex-start", object_fit="contain"))
        self.prompt = widgets.Text(value=default_prompt, description="Prompt:")
        self.precision = precision_widget()
        self.assistant = widgets.IntSlider(value=block_size, min=1, max=block_size, description="Draft tokens:",
                                           style=wide)
        self.markov = widgets.ToggleButtons(options=[("Top-K scorer", None), ("dense walk", 0)],
                                            description="Markov head:")
        self.threshold = widgets.FloatSlider(value=DEFAULT_CONFIDENCE_THRESHOLD, min=0.0, max=1.0, step=0.05,
                                             description="Confidence ≥", style=wide)
        self.budget = widgets.BoundedIntText(value=max_new_tokens, min=1, max=4096, description="Max tokens:")
        self.run = widgets.Button(description="Read the page", button_style="primary")
        self.text, self.result = widgets.Output(), widgets.Output()
        self.settings = [self.prompt, self.precision, self.assistant, self.markov, self.threshold, self.budget,
                         self.run]
        named = {"page": self.page, "typed": self.typed, "upload": self.upload, "clear": self.clear,
                 "preview": self.preview, "prompt": self.prompt, "precision": self.precision,
                 "assistant": self.assistant, "markov": self.markov, "threshold": self.threshold,
                 "budget": self.budget, "run": self.run, "text": self.text, "result": self.result}
        if self.devices is not None:
            named["device"] = self.devices
            self.settings.insert(1, self.devices)
        for name, widget in named.items():
            widget.add_class(f"dspark-{name}")
        self.inputs = [self.page, self.typed, self.upload, self.clear, *self.settings]

    def _layout(self):
        import ipywidgets as widgets

        from utils.contract.target import read_typewriter_page

        controls = widgets.VBox([widgets.HBox([self.page, self.upload, self.clear]), self.typed, *self.settings])
        reach = read_typewriter_page(self.target)
        header = [] if reach is None else [widgets.HTML(_reach_html(reach))]
        return widgets.VBox([*header, widgets.HBox([controls, self.preview]), self.text, self.result])

    def pipelines(self):
        """(target only, speculative) for the chosen device and precision, compiled on first use."""
        from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

        key = (self.device or self.devices.value, self.precision.value)
        if key not in self._pipelines:
            device, precision = key
            self._pipelines[key] = (SpeculativeOcrPipeline(self.target, device=device, precision=precision),
                                    SpeculativeOcrPipeline(self.target, self.draft, device=device,
                                                           precision=precision))
        return self._pipelines[key]

    def show_error(self, error: BaseException) -> None:
        self.result.append_stdout(error_message(error) + "\n")

    def typed_pages(self) -> list[list[str]]:
        """The rows of each page of the typed text (`typed_pages_lines`); none when the box is blank or an upload
        is chosen."""
        from utils.pages.typewriter import typed_pages_lines

        return [] if self.upload.value or not self.typed.value.strip() else typed_pages_lines(self.typed.value)

    def page_truth(self, number: int) -> str | None:
        """The text of page `number` (from 1) when the panel knows it (a sample or a typed page), else None."""
        from utils.pages.typewriter import page_text

        if self.upload.value:
            return None
        typed = self.typed_pages()
        return page_text(typed[number - 1]) if typed else self.pages[self.page.value].text

    def chosen_pages(self):
        """The pages to read, rendered on demand: (count, page number -> RGB image)."""
        from utils.pages.typewriter import render_typewriter_page
        from utils.pipeline.preprocessing.image_io import load_rgb_image
        from utils.pipeline.preprocessing.pdf import PdfPages, is_pdf

        typed = self.typed_pages()
        if typed:
            return len(typed), lambda number: render_typewriter_page(typed[number - 1])
        if not self.upload.value:
            image = self.pages[self.page.value].image
            return 1, lambda _: image
        uploaded = self.upload.value[0]
        content, name = bytes(uploaded["content"]), uploaded.get("name")
        if is_pdf(content) or str(name or "").lower().endswith(".pdf"):
            with PdfPages(content, name=name) as document:
                count = len(document)
            return count, lambda number: _render(content, name, number)
        image = load_rgb_image(content)
        return 1, lambda _: image

    def show_preview(self, _=None) -> None:
        import io

        self.clear.disabled = not self.upload.value
        try:
            _, render = self.chosen_pages()
            buffer = io.BytesIO()
            render(1).convert("RGB").save(buffer, format="PNG")
        except Exception as error:  # noqa: BLE001 - any error is a message in the page, never a traceback
            self.preview.value = b""
            self.result.outputs = ()
            self.show_error(error)
            return
        self.preview.value = buffer.getvalue()

    def on_clear(self, _) -> None:
        try:
            self.upload.value = ()
            self.show_preview()
        except Exception as error:  # noqa: BLE001
            self.show_error(error)

    def read(self, count: int, render) -> None:
        """Reads each page with the target alone and with the draft, and shows both; then, for a text typed over
        several pages, the speculative readings joined beside the typed text's rows."""
        from IPython.display import HTML, Markdown

        from utils.evaluation.compare import compare_runs, metrics_rows
        from utils.notebook.display import markdown_table
        from utils.notebook.step_view import reading_html, side_by_side_html, step_views, steps_html

        baseline, speculative = self.pipelines()
        truths, readings = [self.page_truth(number) for number in range(1, count + 1)], []
        for number, truth in enumerate(truths, start=1):
            if count > 1:
                self.run.description = f"Reading page {number} of {count}..."
                self.text.append_stdout(f"--- page {number} of {count} ---\n")
                self.result.append_display_data(Markdown(f"#### Page {number} of {count}"))
            runs = compare_runs(baseline, speculative, render(number), self.prompt.value,
                                max_new_tokens=self.budget.value, num_assistant_tokens=self.assistant.value,
                                markov_head_top_k=self.markov.value, confidence_threshold=self.threshold.value,
                                streamer=self.text.append_stdout)
            drafted, alone = runs["speculative"], runs["target only"]
            readings.append(drafted.texts[0])
            if drafted.notice:
                self.result.append_stdout(drafted.notice + "\n")
            self.result.append_display_data(HTML(side_by_side_html(drafted.texts[0], alone.texts[0])))
            if truth is not None:  # a sample or typed page knows its own text: the reading beside it, with its CER
                self.result.append_display_data(HTML(reading_html(drafted.texts[0], truth)))
            self.result.append_display_data(HTML(steps_html(step_views(drafted.metrics.steps,
                                                                       speculative.token_text))))
            self.result.append_display_data(Markdown(markdown_table(metrics_rows(runs))))
            if count > 1:
                self.text.append_stdout("\n")
        if count > 1 and self.typed_pages():
            self.result.append_display_data(HTML(_joined_html(readings, truths)))

    def on_run(self, _) -> None:
        # Outputs are appended, not captured with `with output:`, which would show an error as a traceback.
        enabled = {widget: widget.disabled for widget in self.inputs}
        for widget in self.inputs:
            widget.disabled = True
        self.run.description = "Reading..."
        self.text.outputs, self.result.outputs = (), ()
        try:
            self.read(*self.chosen_pages())
        except Exception as error:  # noqa: BLE001 - any error is a message in the page, never a traceback
            self.show_error(error)
        finally:
            for widget, disabled in enabled.items():
                widget.disabled = disabled
            self.run.description = "Read the page"


def _joined_html(readings: list[str], truths: list[str]) -> str:
    """The readings of a typed text's pages joined as the text reads, beside the typed text's rows joined the same
    way, with its CER (`utils.pages.typewriter.joined_reading`)."""
    from utils.pages.typewriter import joined_reading
    from utils.notebook.step_view import reading_html

    return (f"<div class='dspark-joined'><h4>The typed text, read as {len(readings)} pages and joined</h4>"
            f"{reading_html(joined_reading(readings), joined_reading(truths))}</div>")


def _reach_html(reach) -> str:
    """What a typewriter reader (the tiny pair) reads, and how to read anything else: above the panel's controls."""
    return (f"<p class='dspark-reach'><b>The tiny pair reads typewriter pages</b>: {reach.rows} rows of "
            f"{reach.columns} printable ASCII characters in its own font, as the sample pages and a typed page are "
            f"drawn. An upload of any other kind (a photo, a scan, another font or page size) is read with a notice, "
            f"and the reading means little. For real documents export the real pair (docs/real-checkpoints.md) and "
            f"start the app with DSPARK_OCR_TARGET and DSPARK_OCR_DRAFT naming its folders.</p>")


def _render(content: bytes, name: str | None, number: int):
    """Page `number` of an uploaded PDF."""
    from utils.pipeline.preprocessing.pdf import PdfPages

    with PdfPages(content, name=name) as document:
        return document.render(number)
