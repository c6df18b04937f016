"""The options of the benchmarks that measure one tiny pair: which pair, and how many held-out pages it reads."""

from __future__ import annotations

import argparse

from utils.cli import existing_dir, int_at_least

__all__ = ["HELD_OUT_PAGES", "add_pair_option", "add_held_out_pages_option"]

HELD_OUT_PAGES = 40  # as the shipped pair's manifest reads them (`utils.tiny.reading_report.READING_PAGES`)


def add_pair_option(parser: argparse.ArgumentParser) -> None:
    """`--pair DIR`: a tiny pair folder; None (the shipped pair) when not given."""
    parser.add_argument("--pair", metavar="DIR", type=existing_dir,
                        help="a tiny pair folder (target/, draft/); default: the shipped pair")


def add_held_out_pages_option(parser: argparse.ArgumentParser) -> None:
    """`--pages N`: held-out generated pages, read beside the pages written by hand."""
    parser.add_argument("--pages", metavar="N", type=int_at_least(1), default=HELD_OUT_PAGES,
                        help="held-out generated pages (the pages written by hand are read too)")
