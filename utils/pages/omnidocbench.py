"""OmniDocBench pages for the seed's validation: one page per document category, downloaded only when online.

The seed PR measured "one OmniDocBench page per document category (8 pages)" without listing them. The rule
here is fixed and printed with the results: for each `data_source` of the annotation file, in sorted order,
the page the seed names if it is of that category, else the first image by name; at most `limit` categories.
"""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from utils.pages.samples import SamplePage

__all__ = ["OMNIDOCBENCH_ID", "ANNOTATIONS", "SEED_PAGE", "pages_per_category", "download_omnidocbench_pages"]

OMNIDOCBENCH_ID = "opendatalab/OmniDocBench"
ANNOTATIONS = "OmniDocBench.json"  # a list of pages: {"page_info": {"image_path", "page_attribute": {...}}, ...}
SEED_PAGE = "scihub_AEM.01420-09.pdf_3.jpg"  # the page of the seed PR's example


def pages_per_category(annotations: list[dict], *, limit: int = 8) -> list[tuple[str, str]]:
    """(category, image file name) of one page per document category, by the module's rule.

    Args:
        annotations: the parsed `OmniDocBench.json`.
        limit: the most categories taken (the seed's 8).

    Returns:
        The pages, in category order.
    """
    by_category: dict[str, list[str]] = {}
    for index, page in enumerate(annotations):
        info = page.get("page_info") if isinstance(page, dict) else None
        try:
            image, category = info["image_path"], info["page_attribute"]["data_source"]
        except (TypeError, KeyError) as error:
            raise ValueError(f"{ANNOTATIONS}: page {index} has no page_info.image_path and "
                             f"page_info.page_attribute.data_source ({error!r})") from None
        by_category.setdefault(category, []).append(Path(image).name)
    chosen = []
    for category in sorted(by_category)[:limit]:
        names = sorted(by_category[category])
        chosen.append((category, SEED_PAGE if SEED_PAGE in names else names[0]))
    return chosen


def download_omnidocbench_pages(folder: Path | str, *, limit: int = 8) -> list[SamplePage]:
    """Downloads the annotation file and one page per category into `folder` (needs internet) and opens them.

    Args:
        folder: where the dataset files are kept (reused when already there).
        limit: the most categories taken.

    Returns:
        The pages, named `category/file name`, with no reference text.
    """
    from huggingface_hub import hf_hub_download

    def fetch(name: str) -> Path:
        return Path(hf_hub_download(OMNIDOCBENCH_ID, name, repo_type="dataset", local_dir=folder))

    annotations = json.loads(fetch(ANNOTATIONS).read_text(encoding="utf-8"))
    pages = []
    for category, name in pages_per_category(annotations, limit=limit):
        with Image.open(fetch(f"images/{name}")) as image:
            pages.append(SamplePage(f"{category}/{name}", "", image.convert("RGB")))
    return pages
