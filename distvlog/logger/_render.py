"""Renderers, the last structlog processor: an event dict becomes the bytes of one whole record, in glog
text or JSON lines, written by `distvlog.format` (the format's one owner)."""

from __future__ import annotations

from typing import Any

from ..format import PREFIX_FIELDS, SUFFIXES, GlogWriter, json_header, json_record, pairs_of


class GlogRenderer:
    """glog text, byte-compatible with glog so lnav's glog format, grep and sort keep working."""

    suffix = SUFFIXES["glog"]

    def __init__(self) -> None:
        self._writer = GlogWriter()
        self.lines = self._writer.records  # (the engine's batches write through it directly)
        self.header = self._writer.header

    def __call__(self, _logger: object, _method: str, ed: dict[str, Any]) -> bytes:
        fields = pairs_of(ed, PREFIX_FIELDS) if len(ed) > len(PREFIX_FIELDS) else ""
        return self.lines(
            ed["ts"], ed["severity"], ed["tid"], ed["file"], ed["line"], ed["rank"], ((ed["event"], fields),)
        )


class JsonLinesRenderer:
    """One JSON object per line with the same fields as the glog text."""

    suffix = SUFFIXES["jsonl"]

    def __call__(self, _logger: object, _method: str, ed: dict[str, Any]) -> bytes:
        return json_record(ed)

    def header(self, meta: dict[str, Any]) -> bytes:
        return json_header(meta)


RENDERERS = {"glog": GlogRenderer, "jsonl": JsonLinesRenderer}
