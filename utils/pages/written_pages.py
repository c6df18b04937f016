"""Pages written by hand for measuring the tiny reader: text no generator of `utils.pages.reading_pages` makes.

A reader trained on generated pages can score well on that generator's held-out pages and still not read: it may
find its place by what it expects to write. These pages hold what a person would type to test it (code, tables,
lists, addresses, symbol runs, serial numbers, verse, a page with blank rows and one with short lines), each drawn
in the reader's own font on its one page shape (`typed_lines`), so only the text is new. `measure_reading` reads
them; `docs/tiny-pair.md` reports each page's reading. `LAYOUT_TEXTS` are pages laid out with spaces.
"""

from __future__ import annotations

from utils.pages.samples import SamplePage
from utils.pages.typewriter import page_text, render_typewriter_page, typed_lines

__all__ = ["WRITTEN_TEXTS", "LAYOUT_TEXTS", "written_pages"]

# name -> the page's text, as someone would type it (at most 6 rows of 26 characters)
WRITTEN_TEXTS = {
    "verse": "The kettle sings at seven,\nthe cat steps on the mail;\na gull above the harbour\n"
             "writes loops on the gale.\nWe count the boats at noon\nand lose them in the rain.",
    "code": "def add(a, b):\n    return a + b\n\nfor i in range(3):\n    print(add(i, 2))\nx = {\"k\": [1, 2]}",
    "shopping-list": "eggs x12 ........ 3.49\nmilk 2L ......... 1.15\nrye bread ....... 2.80\n"
                     "apples (6) ...... 4.20\nolive oil 1L .... 8.99\nTOTAL           $20.63",
    "bordered-table": "+------+-------+-----+\n| id   | name  | qty |\n+------+-------+-----+\n"
                      "| A-17 | bolts |  40 |\n| B-02 | nuts  | 125 |\n+------+-------+-----+",
    "address": "Jane Q. Public\n1600 Elm Street, Apt 4B\nSpringfield, IL 62704\ntel +1 (217) 555-0199\n"
               "jane.public@example.org",
    "serials": "K7Q2-ZX91-PLM4-8WER\nx9f3 b2Lk 0oO1 lI|7\nID: 4c1e7d90-aa3f\npw = \"t0p$ecret!#\"\n"
               "hash 9f86d081884c7d65\nref QX-0042/77-b",
    "pangram": "Sphinx of black quartz,\njudge my vow. The five\nboxing wizards jump\n"
               "quickly. Pack my box with\nfive dozen liquor jugs.",
    "invoice": "INVOICE #2024-0917\nDate: 03/11/2025\nConsulting 12h @ 85.00\nSubtotal: 1,020.00\n"
               "VAT 20%:    204.00\nAmount due: EUR 1,224.00",
    "symbols": "^[a-z0-9_.+-]+@\\w+\\.\\w+$\ns/(\\d{3})-(\\d{4})/\\2\\1/g\n{\"a\": [1, {\"b\": null}]}\n"
               "<tag attr='v'>&amp;</tag>\n~/bin/run.sh --x=1 2>&1 |\n(a+b)*c != a*(b+c) % 7",
    "markdown": "# TODO (v2.3.1)\n- [x] fix #482 @kim\n- [ ] bump deps >= 0.9\n* note: 50% of 1e-3 ~ 0\n"
                "> \"quote\" -- Ann, p.12\n`code` _em_ **bold**",
    "formulas": "x = (-b +/- sqrt(D)) / 2a\nD = b^2 - 4ac\nf'(x) = 3x^2 - 2x + 1\nsum_{i=1}^{n} i = n(n+1)/2\n"
                "|v| <= 1e-6; a != b\npi ~ 3.14159 & e ~ 2.718",
    "csv": "date,item,qty,price\n2025-01-03,widget,4,2.50\n2025-01-04,gizmo,1,19.99\n2025-01-09,cog,12,0.75\n"
           "2025-02-11,gear,3,4.00",
    "short-lines": "Meet at 4:15pm\nRoom B-204\nBring ID card",
    "blank-rows": "Chapter 7\n\nThe End?\n\n           -- fin --",
}

# name -> a page laid out with spaces, as someone would type it: nested keys, an outline, columns aligned by runs of
# spaces, a centred title (`utils.pages.reading_pages.LAYOUT_KINDS` generates such rows). A reader that writes rows
# without their trailing spaces must count every space from the page; the shipped reader, trained on padded rows
# only, loses its place in them, so they are measured apart (`written_pages(LAYOUT_TEXTS)`).
LAYOUT_TEXTS = {
    "yaml": "server:\n  host: 10.0.0.7\n  port: 8443\n  tls:\n    cert: /etc/ssl/a.pem\n    verify: true",
    "outline": "Plan\n 1. survey the site\n   - soil, water\n   - access road\n 2. draw the plans\n"
               "        (due in May)",
    "aligned-columns": "name     qty   price\nbolt      40    0.12\nwasher   125    0.03\nhinge      2   14.50\n"
                       "\ntotal          34.80",
    "centred-title": "      ANNUAL REPORT\n         2024\n\nSales rose by 12% and\ncosts fell a little.\n"
                     "          - 3 -",
}


def written_pages(texts: dict[str, str] = WRITTEN_TEXTS) -> list[SamplePage]:
    """The hand-written pages of `texts` (name -> text), in its order, drawn in the sample pages' ink on the one page
    shape."""
    pages = []
    for name, text in texts.items():
        lines = typed_lines(text)
        pages.append(SamplePage(name, page_text(lines), render_typewriter_page(lines)))
    return pages
