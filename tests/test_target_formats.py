"""`benchmarks.target_formats` on what runs without real-size models: the tiny reader read with its target in
INT8 and INT4 (the figures are measured, only their shape and the INT8 self-agreement are checked)."""

from __future__ import annotations

from benchmarks.target_formats import FORMATS, measure_tiny_reader


def test_the_tiny_reader_is_read_in_each_target_format():
    figures = measure_tiny_reader(pages=2)
    assert list(figures) == list(FORMATS)
    assert figures["int8"]["equal to int8"] == 2
    assert all(0.0 <= figures[fmt]["cer"] and 0 <= figures[fmt]["equal to int8"] <= 2 for fmt in FORMATS)
