"""What a file's header tells the reader: the year, the distvlog metadata, and the clock offset to rank 0.

Our files start with glog's header lines and a `distvlog-meta` record (see distvlog/logger/_render.py);
foreign glog files may have glog's header lines (`Log file created at: yyyy/mm/dd ...`) or nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

META_EVENT = b"distvlog-meta"
MERGED_MARK = "Merged by distvlog:"
PROCESSES_MARK = "Merged processes:"  # a merged file's header line listing the process of every file it merged
_WHO = ("run_id", "rank", "pid", "world_size")  # what a meta record says about the process that wrote it
_CREATED = re.compile(rb"^Log file created at: (\d{4})/(\d\d)/(\d\d) ")
_META = re.compile(rb" distvlog:0\] (?:\[rank \d+\] )?distvlog-meta (\{.*\})$")
_HEADER_LINE = re.compile(
    rb"^(Log file created at: |Running on machine: |Running duration |Log line format: |"
    + MERGED_MARK.encode()
    + b"|"
    + PROCESSES_MARK.encode()
    + rb")"
)


def is_header_line(line: bytes) -> bool:
    """One of glog's (or our merged file's) header lines, which come before the first record."""
    return _HEADER_LINE.match(line) is not None


def created_year(lines: list[bytes]) -> int | None:
    for line in lines:
        match = _CREATED.match(line)
        if match:
            return int(match.group(1))
    return None


def host_of(lines: list[bytes]) -> str | None:
    for line in lines:
        if line.startswith(b"Running on machine: "):
            return line[20:].decode("utf-8", "replace").strip() or None
    return None


def meta_from_glog(record: bytes) -> dict[str, Any] | None:
    """The metadata dict of a `distvlog-meta` glog record, None for any other record."""
    match = _META.search(record.split(b"\n", 1)[0])
    try:
        meta = json.loads(match.group(1)) if match else None
    except ValueError:
        return None
    return meta if isinstance(meta, dict) and "rank" in meta else None


def meta_from_json(obj: dict[str, Any]) -> dict[str, Any] | None:
    meta = obj.get("meta") if obj.get("event") == META_EVENT.decode() else None
    return meta if isinstance(meta, dict) and "rank" in meta else None


def processes_line(metas: list[dict[str, Any]]) -> bytes:
    """The header line by which a merged file names the processes whose records it holds: their meta records
    are spread over the file at the times the processes started, past the head a reader looks at."""
    listed = json.dumps([{k: m.get(k) for k in _WHO} for m in metas], separators=(",", ":"))
    return f"{PROCESSES_MARK} {listed}\n".encode()


def metas_in(text: bytes) -> list[dict[str, Any]]:
    """Which processes' records a file holds, from the head of the file (`text`, whole lines): a merged
    file's processes line, else the metadata of every `distvlog-meta` record (glog or JSON lines) in it."""
    for line in text.split(b"\n", 8)[:8]:  # the header lines, before the first record
        if not is_header_line(line):
            break
        if line.startswith(PROCESSES_MARK.encode()):
            try:
                listed = json.loads(line[len(PROCESSES_MARK) :])
            except ValueError:  # cut short by the head's end (hundreds of ranks): their records tell
                break
            if isinstance(listed, list) and all(isinstance(m, dict) and "rank" in m for m in listed):
                return listed
    out = []
    at = text.find(META_EVENT)
    while at >= 0 and (end := text.find(b"\n", at)) >= 0:
        line = text[text.rfind(b"\n", 0, at) + 1 : end].rstrip(b"\r")
        at = text.find(META_EVENT, end)
        meta = meta_from_glog(line)
        if meta is None and line.lstrip().startswith(b"{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            meta = meta_from_json(obj) if isinstance(obj, dict) else None
        if meta is not None:
            out.append(meta)
    return out


def _slot(text: Any) -> tuple[float, int] | None:
    """(offset µs, measured at µs) from a clock slot "<offset> <uncertainty> <ts>", None when blank."""
    parts = str(text or "").split()
    try:
        return (float(parts[0]), int(parts[2])) if len(parts) >= 3 else None
    except ValueError:
        return None


@dataclass
class Clock:
    """This rank's clock offset to rank 0, linear between the start and end measurements (clamped)."""

    points: list[tuple[float, int]] = field(default_factory=list)

    @classmethod
    def from_meta(cls, meta: dict[str, Any] | None) -> Clock:
        if not meta:
            return cls()
        return cls([p for p in (_slot(meta.get("clock_start")), _slot(meta.get("clock_end"))) if p])

    def __bool__(self) -> bool:
        return any(offset for offset, _ in self.points)

    def correct(self, ts: np.ndarray) -> np.ndarray:
        """Timestamps (epoch µs, this rank's clock) moved onto rank 0's clock."""
        if not self:
            return ts
        if len(self.points) == 1 or self.points[0][1] == self.points[1][1]:
            return ts + int(round(self.points[0][0]))
        (o0, t0), (o1, t1) = self.points
        frac = np.clip((ts - t0) / (t1 - t0), 0.0, 1.0)
        return ts + np.rint(o0 + (o1 - o0) * frac).astype(np.int64)
