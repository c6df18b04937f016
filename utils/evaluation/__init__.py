"""Measuring the pair: sample pages, acceptance statistics, comparisons, the benchmark and its plots.

- `pages`: sample document pages drawn offline, and the corpus they come from.
- `acceptance`: tokens per step, acceptance by position, confidence calibration.
- `compare`: precision studies and first differences between runs.
- `benchmark`: target-only vs speculative decoding over the pages (`python -m utils.bench`).
- `compression_report`: what weight compression changes (agreement, acceptance, size).
- `plots`: matplotlib figures of benchmark results.
"""
