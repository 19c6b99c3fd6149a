"""Renderers (the last structlog processor) and the file header, for glog text and JSON lines.

A glog record is `Lmmdd hh:mm:ss.uuuuuu tid file:line] [rank R] message k=v ...`: structured fields follow
the first line of the message as logfmt pairs, continuation lines follow as-is. A JSON-lines record is one
object with the same fields. Both return bytes, one whole record, ready for the sink.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from .._json import dumps, json_line
from ._clock import now_us

FORMAT_VERSION = 1
# Fields the glog prefix carries; every other field (v included) follows the message as k=v.
CORE_FIELDS = frozenset({"event", "ts", "severity", "rank", "world_size", "tid", "file", "line"})
_needs_quotes = re.compile(r'[\s"=]').search
GLOG_HEADER_FORMAT = "Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg"
META_EVENT = "distvlog-meta"
# Header slots patched in place once the clock offset is measured: "<offset_us> <uncertainty_us> <ts_us>".
CLOCK_SLOT_WIDTH = 64
CLOCK_SLOTS = ("clock_start", "clock_end")


def logfmt_value(value: Any) -> str:
    """A logfmt value: bare when it has no spaces, quotes or '=', else a JSON string."""
    kind = type(value)
    if kind is str:  # the common case first: names, shapes, checksums
        text = value
    elif kind is int or kind is float or kind is bool or value is None:
        return str(value)
    else:
        text = str(value) if isinstance(value, (int, float, np.generic)) else (dumps(value).decode())
    return json.dumps(text) if not text or _needs_quotes(text) else text


def logfmt_pairs(fields: dict[str, Any]) -> str:
    """` k=v` for each field, in order; numbers and plain strings inline (the renderer inlines this too: a
    call per record is measurable)."""
    return "".join(
        [
            f" {k}={v}"
            if (kind := type(v)) is int or kind is float or kind is str and v and not _needs_quotes(v)
            else f" {k}={logfmt_value(v)}"
            for k, v in fields.items()
        ]
    )


_DIGITS3 = [f"{i:03d}" for i in range(1000)]


class GlogRenderer:
    """glog text, byte-compatible with glog so lnav's glog format, grep and sort keep working.

    Everything but the microseconds and the message is cached: `Lmmdd hh:mm:ss.` per second and severity,
    ` tid file:line] [rank R] ` per thread and call site. Threads render concurrently, so the second and
    its heads are one tuple, read once per batch of records."""

    suffix = ".log"

    def __init__(self) -> None:
        self._stamp: tuple[int, dict[str, str]] = (-1, {})
        self._sites: dict[tuple, str] = {}

    def __call__(self, _logger: object, _method: str, ed: dict[str, Any]) -> bytes:
        pairs = (
            "".join(
                [
                    f" {k}={v}"
                    if (kind := type(v)) is int or kind is float or kind is str and v and not _needs_quotes(v)
                    else f" {k}={logfmt_value(v)}"
                    for k, v in ed.items()
                    if k not in CORE_FIELDS
                ]
            )
            if len(ed) > len(CORE_FIELDS)
            else ""
        )
        return self.lines(
            ed["ts"], ed["severity"], ed["tid"], ed["file"], ed["line"], ed["rank"], ((ed["event"], pairs),)
        )

    def lines(
        self, ts: int, severity: str, tid: int, file: str, line: int, rank: int, records: Iterable[tuple[Any, str]]
    ) -> bytes:
        """Records made at one moment by one call site, each `(event, pairs)` (`pairs`: the rendered ` k=v`
        of its other fields), as one piece of bytes."""
        second, us = divmod(ts, 1_000_000)
        stamp = self._stamp
        if second != stamp[0]:
            text = time.strftime("%m%d %H:%M:%S", time.localtime(second))
            stamp = self._stamp = (second, {sev: f"{sev}{text}." for sev in "IWEF"})
        key = (tid, file, line, rank)
        site = self._sites.get(key)
        if site is None:
            if len(self._sites) > 100_000:
                self._sites.clear()
            site = self._sites[key] = f" {tid} {file}:{line}] [rank {rank}] "
        prefix = f"{stamp[1][severity]}{_DIGITS3[us // 1000]}{_DIGITS3[us % 1000]}{site}"
        texts = []
        for event, pairs in records:
            if type(event) is not str:
                event = "" if event is None else str(event)
            if pairs and "\n" in event:  # the fields end the first line
                first, _, rest = event.partition("\n")
                texts.append(f"{prefix}{first}{pairs}\n{rest}\n")
            else:
                texts.append(f"{prefix}{event}{pairs}\n")
        text = texts[0] if len(texts) == 1 else "".join(texts)
        try:
            return text.encode()
        except UnicodeEncodeError:  # lone surrogates (undecodable file names...): kept visible, escaped
            return text.encode("utf-8", "backslashreplace")

    def header(self, meta: dict[str, Any]) -> bytes:
        created = time.localtime(meta["created_us"] // 1_000_000)
        record = _meta_record(meta)
        record["event"] += " " + json.dumps(record.pop("meta"), separators=(",", ":"))
        return (
            f"Log file created at: {time.strftime('%Y/%m/%d %H:%M:%S', created)}\n"
            f"Running on machine: {meta['host']}\n{GLOG_HEADER_FORMAT}\n"
        ).encode() + self(None, "info", record)


class JsonLinesRenderer:
    """One JSON object per line with the same fields as the glog text (NaN and Inf spelled out)."""

    suffix = ".jsonl"

    def __call__(self, _logger: object, _method: str, ed: dict[str, Any]) -> bytes:
        return json_line(ed)

    def header(self, meta: dict[str, Any]) -> bytes:
        return self(None, "info", _meta_record(meta))


def clock_slot(offset_us: float, uncertainty_us: float, ts_us: int) -> str:
    text = f"{offset_us:.1f} {uncertainty_us:.1f} {ts_us}"
    return text.ljust(CLOCK_SLOT_WIDTH)[:CLOCK_SLOT_WIDTH]


def _meta_record(meta: dict[str, Any]) -> dict[str, Any]:
    # The metadata is itself a record, so lnav and every tool parse it like any other line.
    return {
        "ts": meta["created_us"],
        "severity": "I",
        "rank": meta["rank"],
        "world_size": meta["world_size"],
        "tid": meta["tid"],
        "file": "distvlog",
        "line": 0,
        "event": META_EVENT,
        "meta": meta,
    }


def make_meta(*, rank: int, world_size: int, host: str, pid: int, tid: int, run_id: str, fmt: str) -> dict[str, Any]:
    created_us = now_us()
    local = time.localtime(created_us // 1_000_000)
    return {
        "distvlog": FORMAT_VERSION,
        "format": fmt,
        "rank": rank,
        "world_size": world_size,
        "host": host,
        "pid": pid,
        "tid": tid,
        "run_id": run_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S", local) + f".{created_us % 1_000_000:06d}",
        "created_us": created_us,
        "utc_offset_s": local.tm_gmtoff,
        "clock_start": clock_slot(0.0, 0.0, created_us),
        "clock_end": " " * CLOCK_SLOT_WIDTH,
    }


RENDERERS = {"glog": GlogRenderer, "jsonl": JsonLinesRenderer}
