"""A page is chosen by what its reading shows: the first that qualifies, or an error saying none did."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from utils.evaluation.page_choice import first_reading, read_exactly


def test_the_first_page_whose_reading_is_wanted_is_returned_and_later_pages_are_not_read():
    pages = [SimpleNamespace(text="ab"), SimpleNamespace(text="cd"), SimpleNamespace(text="ef")]
    read = []
    index, page, reading = first_reading(pages, lambda p: read.append(p) or p.text.upper() if p is pages[0] else p.text,
                                         lambda p, r: read_exactly(r, p), what="is read without an error")
    assert (index, page, reading) == (1, pages[1], "cd") and read == [pages[0]]  # pages[2] never read


def test_no_qualifying_page_is_an_error_that_says_what_was_looked_for():
    with pytest.raises(ValueError, match="none of the 1 pages is read without an error"):
        first_reading([SimpleNamespace(text="ab")], lambda p: "xx", lambda p, r: read_exactly(r, p),
                      what="is read without an error")
