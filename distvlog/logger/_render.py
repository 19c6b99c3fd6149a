"""Renderers, the last structlog processor: an event dict becomes the bytes of one whole record, in glog
text or JSON lines, written by `distvlog.format` (the format's one owner)."""

from __future__ import annotations

from typing import Any

from ..format import SUFFIXES, GlogWriter, json_header, json_record


class GlogRenderer(GlogWriter):
    """glog text, byte-compatible with glog so lnav's glog format, grep and sort keep working (the format's
    writer is itself a structlog processor: a call per record, not two)."""

    suffix = SUFFIXES["glog"]


class JsonLinesRenderer:
    """One JSON object per line with the same fields as the glog text."""

    suffix = SUFFIXES["jsonl"]

    def __call__(self, _logger: object, _method: str, ed: dict[str, Any]) -> bytes:
        return json_record(ed)

    def header(self, meta: dict[str, Any]) -> bytes:
        return json_header(meta)


RENDERERS = {"glog": GlogRenderer, "jsonl": JsonLinesRenderer}
