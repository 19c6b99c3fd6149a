"""The report's table of the collapsed timeline (`merge --collapse`) around the first place ranks differ:
what every rank did just before, the records that set ranks apart, and what followed."""

from __future__ import annotations

import contextlib
import html
from collections import deque

from ..merge import Row, collapsed, rows, stands_apart

BEFORE, AFTER = 8, 16  # rows before the first difference, and from it on


def around_first_difference(paths: list[str]) -> list[Row]:
    """The rows around the first group where ranks differ (or that holds an error); none when ranks agree
    throughout. Reads no further than that."""
    before: deque[Row] = deque(maxlen=BEFORE)
    out: list[Row] = []
    with contextlib.closing(collapsed(paths)) as groups:
        for folded in groups:
            if out:
                out += rows(folded)
            elif stands_apart(folded):
                out = [*before, *rows(folded)]
            else:
                before.extend(rows(folded))
            if len(out) >= BEFORE + AFTER:
                break
    return out[: BEFORE + AFTER]


def table_html(found: list[Row]) -> str:
    if not found:
        return "<p>Every rank wrote the same records (values agreed or spread): nothing sets ranks apart.</p>"
    cells = "".join(
        f"<tr{' class=apart' if row.marked else ''}><td>{html.escape(row.stamp)}</td><td>{html.escape(row.site)}</td>"
        f"<td>{html.escape(row.who)}</td><td>{html.escape(row.text)}</td></tr>"
        for row in found
    )
    return (
        "<h2>Timeline around the first difference (<code>distvlog merge --collapse</code>)</h2>"
        "<table class=timeline><tr><th>time</th><th>site</th><th>ranks</th><th>record</th></tr>"
        f"{cells}</table>"
    )
