"""ipywidgets helpers for the notebooks (ipywidgets is imported inside, so `utils` stays light)."""

from __future__ import annotations

__all__ = ["device_widget", "ocr_app"]


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


def ocr_app(baseline, speculative, pages, *, block_size: int, default_prompt: str = "Text Recognition:"):
    """The interactive OCR panel of notebook 05: page picker, upload, prompt, knobs, run button, streamed text
    and a metrics table comparing target-only and speculative decoding of the same page.

    Args:
        baseline: a `SpeculativeOcrPipeline` without a draft.
        speculative: one with the draft.
        pages: `utils.pages.sample_pages()`.
        block_size: the draft's block size (the largest `num_assistant_tokens`).
    """
    import io

    import ipywidgets as widgets
    from IPython.display import Markdown, display
    from PIL import Image

    from utils.display import markdown_table
    from utils.runtime.compare import compare_runs, metrics_rows

    page = widgets.Dropdown(options=[(p.name, index) for index, p in enumerate(pages)], description="Page:")
    upload = widgets.FileUpload(accept="image/*", multiple=False, description="Upload")
    prompt = widgets.Text(value=default_prompt, description="Prompt:")
    assistant = widgets.IntSlider(value=block_size, min=1, max=block_size, description="Draft tokens:")
    markov = widgets.ToggleButtons(options=[("Top-K scorer", None), ("dense walk", 0)], description="Markov head:")
    run = widgets.Button(description="Read the page", button_style="primary")
    text, table = widgets.Output(), widgets.Output()

    def chosen_image():
        if upload.value:
            return Image.open(io.BytesIO(bytes(upload.value[0]["content"])))
        return pages[page.value].image

    def on_run(_):
        text.clear_output()
        table.clear_output()
        with text:
            results = compare_runs(baseline, speculative, chosen_image(), prompt.value,
                                   num_assistant_tokens=assistant.value, markov_head_top_k=markov.value,
                                   streamer=lambda piece: print(piece, end="", flush=True))
        with table:
            display(Markdown(markdown_table(metrics_rows(results))))

    run.on_click(on_run)
    controls = widgets.VBox([widgets.HBox([page, upload]), prompt, assistant, markov, run])
    return widgets.VBox([controls, text, table])
