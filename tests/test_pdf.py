"""A PDF in, text out: pages rendered with PDFium in order, one result per page, and bad PDFs refused."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from pdfs import blank_pdf, pdf_of_images
from utils.pages.reading_pages import sample_pages
from utils.pipeline.preprocessing import pdf as pdf_module
from utils.pipeline.preprocessing.pdf import PDF_DPI, PdfPages, is_pdf


@pytest.fixture
def two_pages(tmp_path):
    """A PDF of two different sample pages, page 1 then page 2."""
    pages = sample_pages()
    return pdf_of_images([pages[0].image, pages[5].image], tmp_path / "two.pdf")


def test_pages_render_in_order_each_at_its_images_size(two_pages):
    pages = sample_pages()
    with PdfPages(two_pages) as document:
        assert len(document) == 2 and list(document.numbers()) == [1, 2] and list(document.numbers((2, 2))) == [2]
        for number, source in zip((1, 2), (pages[0].image, pages[5].image)):
            image = document.render(number)
            assert image.mode == "RGB" and image.size == source.size


@pytest.mark.parametrize("dpi", [72, 150, 300])
def test_typewriter_pages_saved_at_any_resolution_render_at_the_readers_cell_size(dpi, tmp_path):
    """A typewriter page saved as a PDF at 72 dpi (a page of 756 x 168 points) rendered at 150 dpi came back
    1575 x 350 pixels, cells of 58 pixels the tiny pair cannot read; its image is rendered at its own size, pixel
    for pixel what the PDF holds, as at 150 dpi (the PDF stores the page as a JPEG: within its rounding)."""
    import numpy as np

    pages = [page.image for page in sample_pages()[:2]]
    with PdfPages(pdf_of_images(pages, tmp_path / f"typed-{dpi}.pdf", dpi=dpi)) as document, \
            PdfPages(pdf_of_images(pages, tmp_path / "typed-150.pdf", dpi=PDF_DPI)) as reference:
        for number, source in enumerate(pages, start=1):
            image = document.render(number)
            assert image.size == source.size == (756, 168)
            assert np.array_equal(np.asarray(image), np.asarray(reference.render(number)))
            assert np.abs(np.asarray(image, float) - np.asarray(source, float)).mean() < 2


def test_a_page_that_is_no_image_renders_at_the_resolution(tmp_path):
    with PdfPages(blank_pdf(tmp_path / "blank.pdf")) as document:
        assert document.render(1).size == (round(200 * PDF_DPI / 72), round(100 * PDF_DPI / 72))


def test_a_huge_page_is_rendered_within_the_pixel_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(pdf_module, "MAX_IMAGE_PIXELS", 10_000)
    with PdfPages(pdf_of_images([Image.new("RGB", (400, 100), "white")], tmp_path / "wide.pdf")) as document:
        image = document.render(1)
    assert image.width * image.height <= 10_000 and abs(image.width / image.height - 4) < 0.1


def test_is_pdf_goes_by_the_name_or_the_first_bytes(two_pages):
    assert is_pdf(two_pages) and is_pdf(str(two_pages).upper()) and is_pdf(two_pages.read_bytes())
    assert not is_pdf("page.png") and not is_pdf(b"\x89PNG\r\n")


def _json(main, argv, capsys) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_command_line_reads_every_page_in_order_with_one_result_each(tiny_ir, two_pages, capsys):
    from utils.ocr import main
    from utils.pipeline.speculative_ocr import SpeculativeOcrPipeline

    common = [str(two_pages), "--target", str(tiny_ir[0]), "--draft", str(tiny_ir[1]), "--max-new-tokens", "12",
              "--device", "CPU", "--precision", "f32", "--json"]
    printed = _json(main, common, capsys)
    assert printed["file"] == str(two_pages) and [page["page"] for page in printed["pages"]] == [1, 2]
    pipeline = SpeculativeOcrPipeline(*tiny_ir, device="CPU", precision="f32")
    with PdfPages(two_pages) as document:
        for page in printed["pages"]:
            expected = pipeline.generate(document.render(page["page"]), max_new_tokens=12)
            assert page["tokens"] == expected.tokens and page["text"] == expected.texts[0]
            assert page["metrics"]["num_generated_tokens"] == len(expected.tokens)
    second = _json(main, common + ["--pages", "2"], capsys)
    assert second["pages"] == [printed["pages"][1] | {"metrics": second["pages"][0]["metrics"]}]


def test_command_line_prints_the_pages_in_order_under_a_progress_bar(tiny_ir, two_pages, capsys):
    from utils.ocr import main

    assert main([str(two_pages), "--target", str(tiny_ir[0]), "--draft", "none", "--max-new-tokens", "4",
                 "--device", "CPU"]) == 0
    printed = capsys.readouterr()
    assert printed.out.index("--- page 1 ---") < printed.out.index("--- page 2 ---")
    assert "2/2" in printed.err and "page 2: " in printed.err  # the bar, then one summary line per page
