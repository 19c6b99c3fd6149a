"""The report's table of the collapsed timeline (`merge --collapse`) around the first place ranks differ:
what every rank did just before, the records that set ranks apart, and what followed."""

from __future__ import annotations

import html

from ..merge import context

BEFORE, AFTER = 8, 16  # rows before the first difference, and from it on


def table_html(paths: list[str]) -> str:
    found = context(paths, BEFORE, AFTER)
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
