"""ipywidgets helpers for the notebooks (ipywidgets is imported inside, so `utils` stays light)."""

from __future__ import annotations

from utils.engine.decoder import DEFAULT_CONFIDENCE_THRESHOLD
from utils.engine.draft import PER_POSITION_ARGMAX
from utils.pipeline.preprocessing.prompt import DEFAULT_PROMPT

__all__ = ["SOURCES", "ERROR_PREFIX", "device_widget", "precision_widget", "error_message", "ocr_app"]

SOURCES = (("sample page", "sample"), ("typed text", "typed"), ("upload", "upload"))  # what the panel can read
ERROR_PREFIX = "error: "  # how every line of `error_message` starts


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
        return f"{ERROR_PREFIX}{error}"
    first_line = (str(error).strip().splitlines() or [""])[0]
    return f"{ERROR_PREFIX}{type(error).__name__}: {first_line} (the traceback is in the server's log)"


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

    Choose what to read with the "Read:" toggle, and only that is read: a sample page, text you type (drawn as
    typewriter pages: what the tiny pair reads; a text longer than one page becomes several,
    `utils.pages.typewriter.typed_pages_lines`), or an uploaded image or PDF (previewed, the first page; a button
    clears it and goes back to the sample page). The controls of the other inputs are disabled, and keep what they
    hold; typing text or uploading a file chooses that input. An empty text box or no upload is an error line when
    Read is pressed, never a silent read of something else. Set the prompt, precision, draft tokens per step, Markov
    computation, confidence threshold and token budget, and press the button: each page is read in turn with the
    target alone and with the draft, and the panel shows the streamed text, both texts side by side with an
    "identical" mark, a sample or typed page's own text beside the reading with its character error rate (one rule
    for every page: `utils.notebook.step_view.text_reading_html`), the per-step view and the metrics; the button
    counts the pages of a longer read ("Reading page 2 of 4..."), and a text typed over several pages ends with the
    pages' readings joined beside the typed text, with its CER. A target that reads only typewriter pages (the tiny
    pair) gets a line saying so above the controls, and a notice under a reading of any other image. The draft
    folder is read once here and the models compile on the first read. Every control is disabled while a read
    runs; any error becomes one line in the panel (the traceback goes to the server's log), which goes as soon as
    any control changes, and the panel stays usable. Every control carries a `dspark-*` CSS class, so a browser
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
        self.source.observe(self.on_change, names="value")
        self.page.observe(lambda _: self.choose("sample"), names="value")
        self.typed.observe(lambda change: self.choose("typed" if change["new"].strip() else None), names="value")
        self.upload.observe(lambda change: self.choose("upload" if change["new"] else None), names="value")
        for setting in self.settings[:-1]:  # a changed setting may be what fixes an error: the line goes
            setting.observe(lambda _: self.clear_error(), names="value")
        self.clear.on_click(self.on_clear)
        self.run.on_click(self.on_run)
        self.on_change()
        self.widget = self._layout()

    def _build_controls(self, default_prompt: str, max_new_tokens: int) -> None:
        """The panel's widgets, each with its `dspark-*` class."""
        import ipywidgets as widgets

        block_size, wide = self.draft.info.block_size, {"description_width": "initial"}
        self.devices = device_widget() if self.device is None else None
        self.source = widgets.ToggleButtons(options=SOURCES, value="sample", description="Read:",
                                            tooltips=["the sample page chosen below", "the text typed below",
                                                      "the image or PDF uploaded below"])
        self.rule = widgets.HTML("<small>Only the input chosen here is read; the others keep what they hold.</small>")
        self.page = widgets.Dropdown(options=[(p.name, index) for index, p in enumerate(self.pages)],
                                     description="Page:")
        self.typed = widgets.Textarea(placeholder="type text here: 6 rows of 26 characters a page, a longer text "
                                                  "read page by page (a longer line is wrapped, a tab is 4 spaces)",
                                      rows=6,
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
        self.markov = widgets.ToggleButtons(options=[("Top-K scorer", None), ("dense walk", 0),
                                                     ("off", PER_POSITION_ARGMAX)], description="Markov head:",
                                            tooltips=["the Top-K candidate scorer (DSpark's default)",
                                                      "the walk over the whole draft vocabulary",
                                                      "no walk: each position's own best token, as DFlash drafts"])
        self.threshold = widgets.FloatSlider(value=DEFAULT_CONFIDENCE_THRESHOLD, min=0.0, max=1.0, step=0.05,
                                             description="Confidence ≥", style=wide)
        self.budget = widgets.BoundedIntText(value=max_new_tokens, min=1, max=4096, description="Max tokens:")
        self.run = widgets.Button(description="Read the page", button_style="primary")
        self.text, self.result = widgets.Output(), widgets.Output()
        self.settings = [self.prompt, self.precision, self.assistant, self.markov, self.threshold, self.budget,
                         self.run]
        named = {"source": self.source, "rule": self.rule, "page": self.page, "typed": self.typed,
                 "upload": self.upload, "clear": self.clear, "preview": self.preview, "prompt": self.prompt,
                 "precision": self.precision, "assistant": self.assistant, "markov": self.markov,
                 "threshold": self.threshold, "budget": self.budget, "run": self.run, "text": self.text,
                 "result": self.result}
        if self.devices is not None:
            named["device"] = self.devices
            self.settings.insert(1, self.devices)
        for name, widget in named.items():
            widget.add_class(f"dspark-{name}")
        self.inputs = [self.source, self.page, self.typed, self.upload, self.clear, *self.settings]

    def _layout(self):
        import ipywidgets as widgets

        from utils.contract.target import read_typewriter_page

        controls = widgets.VBox([self.source, self.rule, widgets.HBox([self.page, self.upload, self.clear]),
                                 self.typed, *self.settings])
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

    def clear_error(self) -> None:
        """Removes the error line from the panel: the input it was about has changed."""
        self.result.outputs = tuple(output for output in self.result.outputs
                                    if not output.get("text", "").startswith(ERROR_PREFIX))

    def choose(self, source: str | None) -> None:
        """Makes `source` the input that is read (a value typed or uploaded chooses its input); None keeps it."""
        if source is None or source == self.source.value:
            self.on_change()
        else:
            self.source.value = source  # whose observer calls on_change

    def on_change(self, _=None) -> None:
        """An input or the choice of input changed: only the chosen input's controls are enabled, the last reading
        and any error line go (they were of another input), and the preview shows what Read would read."""
        active = self.source.value
        self.page.disabled, self.typed.disabled = active != "sample", active != "typed"
        self.upload.disabled, self.clear.disabled = active != "upload", active != "upload" or not self.upload.value
        self.text.outputs, self.result.outputs = (), ()
        self.show_preview()

    def typed_pages(self) -> list[list[str]]:
        """The rows of each page of the typed text (`typed_pages_lines`) when typed text is the chosen input."""
        from utils.pages.typewriter import typed_pages_lines

        if self.source.value != "typed":
            return []
        if not self.typed.value.strip():
            raise ValueError("the text box is empty: type the text to read, or choose another input after Read:")
        return typed_pages_lines(self.typed.value)

    def page_truth(self, number: int) -> str | None:
        """The text of page `number` (from 1) when the panel knows it (a sample or a typed page), else None."""
        from utils.pages.typewriter import page_text

        if self.source.value == "upload":
            return None
        typed = self.typed_pages()
        return page_text(typed[number - 1]) if typed else self.pages[self.page.value].text

    def chosen_pages(self):
        """The pages of the chosen input, rendered on demand: (count, page number -> RGB image)."""
        from utils.pages.typewriter import render_typewriter_page
        from utils.pipeline.preprocessing.image_io import load_rgb_image
        from utils.pipeline.preprocessing.pdf import PdfPages, is_pdf

        if self.source.value == "sample":
            image = self.pages[self.page.value].image
            return 1, lambda _: image
        typed = self.typed_pages()
        if typed:
            return len(typed), lambda number: render_typewriter_page(typed[number - 1])
        if not self.upload.value:
            raise ValueError("nothing is uploaded: upload an image or a PDF, or choose another input after Read:")
        uploaded = self.upload.value[0]
        content, name = bytes(uploaded["content"]), uploaded.get("name")
        if is_pdf(content) or str(name or "").lower().endswith(".pdf"):
            with PdfPages(content, name=name) as document:
                count = len(document)
            return count, lambda number: _render(content, name, number)
        image = load_rgb_image(content)
        return 1, lambda _: image

    def _chosen_is_empty(self) -> bool:
        """Whether the chosen input holds nothing yet (a blank text box, no upload): nothing to preview."""
        return {"sample": False, "typed": not self.typed.value.strip(), "upload": not self.upload.value}[
            self.source.value]

    def show_preview(self) -> None:
        import io

        self.preview.value, self.preview.layout.display = b"", "none"  # nothing to show: no broken-image icon
        if self._chosen_is_empty():
            return
        try:
            _, render = self.chosen_pages()
            buffer = io.BytesIO()
            render(1).convert("RGB").save(buffer, format="PNG")
        except Exception as error:  # noqa: BLE001 - any error is a message in the page, never a traceback
            self.result.outputs = ()
            self.show_error(error)
            return
        self.preview.value = buffer.getvalue()
        self.preview.layout.display = None

    def on_clear(self, _) -> None:
        """Drops the upload and goes back to reading the sample page."""
        try:
            self.upload.value = ()
            self.source.value = "sample"
        except Exception as error:  # noqa: BLE001
            self.show_error(error)

    def read(self, count: int, render) -> None:
        """Reads each page with the target alone and with the draft, and shows both; then, for a text typed over
        several pages, the speculative readings joined beside the typed text."""
        from IPython.display import HTML, Markdown

        from utils.evaluation.compare import compare_runs, metrics_rows
        from utils.notebook.display import markdown_table
        from utils.notebook.step_view import side_by_side_html, step_views, steps_html, text_reading_html

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
                self.result.append_display_data(HTML(text_reading_html([drafted.texts[0]], [truth])))
            self.result.append_display_data(HTML(steps_html(step_views(drafted.metrics.steps,
                                                                       speculative.token_text))))
            self.result.append_display_data(Markdown(markdown_table(metrics_rows(runs))))
            if count > 1:
                self.text.append_stdout("\n")
        if count > 1 and self.source.value == "typed":
            self.result.append_display_data(HTML(
                f"<div class='dspark-joined'><h4>The typed text, read as {count} pages and joined</h4>"
                f"{text_reading_html(readings, truths)}</div>"))

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


def _reach_html(reach) -> str:
    """What a typewriter reader (the tiny pair) reads, and how to read anything else: above the panel's controls."""
    return (f"<p class='dspark-reach'><b>The tiny pair reads typewriter pages</b>: {reach.rows} rows of "
            f"{reach.columns} printable ASCII characters in its own font, as the sample pages and a typed page are "
            f"drawn. An upload of another page size (a photo, a scan) is read with a notice; another font at this "
            f"page size is not detected: it is read without one, as nonsense (the identical mark compares the two "
            f"readings, not a reading with the page). For real documents export the real pair (docs/real-checkpoints.md) and "
            f"start the app with DSPARK_OCR_TARGET and DSPARK_OCR_DRAFT naming its folders.</p>")


def _render(content: bytes, name: str | None, number: int):
    """Page `number` of an uploaded PDF."""
    from utils.pipeline.preprocessing.pdf import PdfPages

    with PdfPages(content, name=name) as document:
        return document.render(number)
