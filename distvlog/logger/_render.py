"""Renderers, the last structlog processor: an event dict becomes the bytes of one whole record, in glog
text or JSON lines, written by `distvlog.format` (the format's one owner)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

from ..format import (
    EVENT,
    PREFIX_FIELDS,
    SUFFIXES,
    GlogWriter,
    json_header,
    json_record,
    message_of,
    unrenderable,
    value_text,
)
from ._processors import add_record_fields, caller_site


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
_said: list[str] = []  # the one line on stderr about records that could not be rendered


def salvage(renderer: Callable[..., bytes], fields: dict[str, Any], event: Any, method: str, exc: Exception) -> bytes:
    """The record of a log call whose rendering raised `exc` (a value's __str__ raised, a container nested
    too deeply or containing itself, a processor failed): each value that cannot be rendered becomes a
    placeholder naming its type, the rest is kept; said once on stderr. Called by the log method itself (the
    caller's frame is two up). Never raises: b"" when even that cannot be rendered."""
    if not _said:
        _said.append(f"{type(exc).__name__}: {exc}")
        with contextlib.suppress(Exception):
            sys.stderr.write(
                f"distvlog: a record could not be rendered ({_said[0][:200]}); it was written with "
                "placeholders for what could not be (said once)\n"
            )
    try:
        ed = {k: _renderable(v) for k, v in fields.items() if k not in PREFIX_FIELDS}
        ed[EVENT] = _renderable(event, message_of)
        ed["file"], ed["line"] = caller_site(sys._getframe(2))
        return renderer(None, method, add_record_fields(None, method, ed))
    except Exception:
        return b""


def _renderable(value: Any, render: Callable[[Any], str] = value_text) -> Any:
    try:
        render(value)
    except Exception as exc:
        return unrenderable(value, exc)
    return value
