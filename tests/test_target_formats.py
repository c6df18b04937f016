"""`benchmarks.target_formats` on what runs without real-size models: the tiny reader read with its target in
INT8 and in INT4, each held to the CER the reader ships at."""

from __future__ import annotations

import pytest

from benchmarks.target_formats import FORMATS, measure_tiny_reader

PAGES = 40  # as many as docs/performance.md measured: INT4's slips come a page at a time (3.7% on the first 6)
SHIP_CER = 0.02  # docs/tiny-pair.md: the ship bound of the reader's CER on held-out generated pages


@pytest.mark.slow
def test_each_target_format_reads_within_the_ship_bound():
    figures = measure_tiny_reader(pages=PAGES)
    assert list(figures) == list(FORMATS)
    assert all(figures[fmt]["cer"] <= SHIP_CER for fmt in FORMATS), figures
