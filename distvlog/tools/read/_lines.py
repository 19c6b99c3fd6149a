"""Text whose lines mostly carry no time (a torchrun worker's stdout/stderr, NCCL's debug file), read as
records of one rank, in file order.

Lines that carry a time are read with it: glog (torchrun's own, C++ glog) and c10's `[rank0]:[E626
06:24:44.159932949 File.cpp:616]` (its month-day not zero-padded; its fraction from a monotonic clock, so
only the seconds are taken), after any stacked `[name]:` prefixes, their year the file's last change's, a
year less for a month after it (December → January), in this machine's time zone; NCCL's lines (_nccl),
timed or not, keep their thread and level. Every other line, and every untimed one, takes the time of the
timed line before it (the first timed line's, before any; the file's last change, in a file with none):
lines stay in file order. A Python traceback, from `Traceback (most recent call last):` to its exception
line, is one E record.
"""

from __future__ import annotations

import re
import time
from typing import Any

from ... import format as fmt
from . import _nccl

_TIMED = re.compile(
    r"(?:\[[^\]\s]+\]:)*\[?([IWEF])(\d{3,4}) (\d\d):(\d\d):(\d\d)\.(\d{6,9})(?: +(\d+))? ([^\s\]]+):(\d+)\] ?(.*)"
)
_TRACEBACK = "Traceback (most recent call last):"
# (time or None, severity, tid, file or None, line or None, event) of a line with a prefix we read
Parsed = tuple[int | None, str, int, str | None, int | None, str]


def records(data: bytes, rank: int, mtime_us: int, name: str) -> list[dict[str, Any]]:
    """The file's records, a record per line that is not empty (a traceback: one record); `name` is the
    file a line without a source of its own is said to come from."""
    lines = Lines(rank, name, mtime_us)
    return lines.feed(data.decode("utf-8", "replace").splitlines(), mtime_us, final=True)[0]


class Lines:
    """A file's lines read as they come (`merge --follow`), or all at once: the time a line without one
    takes carries from one feed to the next. Before the first timed line, lines take that line's time when
    it is in the same feed, else `now_us` (a file read whole: its last change)."""

    def __init__(self, rank: int, name: str, mtime_us: int) -> None:
        self.rank, self.name = rank, name
        self.year, self.month = time.localtime(mtime_us / 1e6)[:2]
        self.ts: int | None = None
        self.done = 0  # lines fed and read so far (the next one's number, less one)

    def feed(self, lines: list[str], now_us: int, final: bool) -> tuple[list[dict[str, Any]], int]:
        """The records of `lines`, and how many of them were read: a traceback whose exception line is not
        among them yet is left for the next feed, unless `final`."""
        parsed = [_stamp(line, self.year, self.month) or _nccl.parse(line) for line in lines]
        if self.ts is None:
            self.ts = next((p[0] for p in parsed if p is not None and p[0] is not None), now_us)
        out: list[dict[str, Any]] = []
        i = 0
        while i < len(lines):
            line, p, number = lines[i], parsed[i], self.done + i + 1
            if p is not None:
                self.ts = max(self.ts, p[0]) if p[0] is not None else self.ts
                out.append(record(self.ts, p[1], self.rank, p[2], p[3] or self.name, p[4] or number, p[5]))
                i += 1
            elif line.strip() == _TRACEBACK:
                end = _traceback_end(lines, i)
                if end is None and not final:
                    break
                end = end or len(lines)
                out.append(record(self.ts, "E", self.rank, 0, self.name, number, "\n".join(lines[i:end])))
                i = end
            else:
                if line.strip():
                    out.append(record(self.ts, "I", self.rank, 0, self.name, number, line))
                i += 1
        self.done += i
        return out, i


def record(ts: int, severity: str, rank: int, tid: int, file: str, line: int, event: str) -> dict[str, Any]:
    """A record as our JSON-lines object."""
    return {
        fmt.TS: ts,
        fmt.SEVERITY: severity,
        fmt.RANK: rank,
        fmt.TID: tid,
        fmt.FILE: file,
        fmt.LINE: line,
        fmt.EVENT: event,
    }


def _stamp(line: str, year: int, month: int) -> Parsed | None:
    """A line with a glog-like prefix, None for other lines."""
    match = _TIMED.fullmatch(line)
    if match is None:
        return None
    severity, mmdd, hh, mm, ss, frac, tid, file, lineno, message = match.groups()
    mon, day = int(mmdd[:-2]), int(mmdd[-2:])
    try:
        seconds = time.mktime((year - (mon > month), mon, day, int(hh), int(mm), int(ss), 0, 0, -1))
    except (OverflowError, ValueError):
        return None
    micros = int(frac) if len(frac) == 6 else 0  # c10's nine digits count a monotonic clock
    return int(seconds) * 1_000_000 + micros, severity, int(tid or 0), file.rpartition("/")[2], int(lineno), message


def _traceback_end(lines: list[str], start: int) -> int | None:
    """Where a traceback that starts at `start` ends: after its exception line (the first unindented one);
    None: not among `lines`."""
    for i in range(start + 1, len(lines)):
        if lines[i] and not lines[i][0].isspace():
            return i + 1
    return None
