"""torchrun's per-worker files (`--log-dir D --redirects 3`: D/<run>_<id>/attempt_K/R/stdout.log, stderr.log,
error.json), read as records of the worker's rank.

A worker's output is mostly lines without a time: prints, warnings, tracebacks. Lines that carry one are
read with it: glog (torchrun's own, C++ glog) and c10's `[rank0]:[E626 06:24:44.159932949 File.cpp:616]`
(its month-day not zero-padded; its fraction from a monotonic clock, so only the seconds are taken), after
any stacked `[name]:` prefixes; their year is the file's last change's, a year less for a month after it
(December → January), in this machine's time zone. Every other line takes the time of the timed line
before it (the first timed line's, before any; the file's last change, in a file with none): lines stay
in file order. A Python traceback, from `Traceback (most recent call last):` to its exception line, is one
E record. `error.json` (an uncaught exception under torchrun's `@record`) is one E record at its
timestamp.
"""

from __future__ import annotations

import re
import time
from typing import Any

import orjson

from ... import format as fmt

_TIMED = re.compile(
    r"(?:\[[^\]\s]+\]:)*\[?([IWEF])(\d{3,4}) (\d\d):(\d\d):(\d\d)\.(\d{6,9})(?: +(\d+))? ([^\s\]]+):(\d+)\] ?(.*)"
)
_TRACEBACK = "Traceback (most recent call last):"


def is_error_json(head: bytes) -> bool:
    return b'"message"' in head[:256] and (b'"extraInfo"' in head or b'"py_callstack"' in head)


def error_records(data: bytes, rank: int, mtime_us: int, name: str) -> list[dict[str, Any]]:
    """error.json as one E record: the traceback it holds, at its timestamp (epoch seconds, a string)."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        obj = {}
    message = obj.get("message") if isinstance(obj, dict) else None
    info = message.get("extraInfo", {}) if isinstance(message, dict) else {}
    info = info if isinstance(info, dict) else {}
    text = info.get("py_callstack") or (message.get("message") if isinstance(message, dict) else message)
    stamp = str(info.get("timestamp", ""))
    ts = int(stamp) * 1_000_000 if stamp.isdigit() else mtime_us
    return [_record(ts, "E", rank, 0, name, 0, str(text or data[:2000].decode("utf-8", "replace")).rstrip())]


def output_records(data: bytes, rank: int, mtime_us: int, name: str) -> list[dict[str, Any]]:
    """A worker's stdout.log / stderr.log, a record per line (a traceback: one record)."""
    lines = data.decode("utf-8", "replace").splitlines()
    year, month = time.localtime(mtime_us / 1e6)[:2]
    stamped = [_stamp(line, year, month) for line in lines]
    first = next((s[0] for s in stamped if s is not None), mtime_us)
    out: list[dict[str, Any]] = []
    ts, i = first, 0
    while i < len(lines):
        line, parsed = lines[i], stamped[i]
        if parsed is not None:
            ts = max(ts, parsed[0])
            out.append(_record(ts, parsed[1], rank, *parsed[2:]))
            i += 1
        elif line.strip() == _TRACEBACK:
            end = _traceback_end(lines, i)
            out.append(_record(ts, "E", rank, 0, name, i + 1, "\n".join(lines[i:end])))
            i = end
        else:
            if line.strip():
                out.append(_record(ts, "I", rank, 0, name, i + 1, line))
            i += 1
    return out


def _record(ts: int, severity: str, rank: int, tid: int, file: str, line: int, event: str) -> dict[str, Any]:
    return {
        fmt.TS: ts,
        fmt.SEVERITY: severity,
        fmt.RANK: rank,
        fmt.TID: tid,
        fmt.FILE: file,
        fmt.LINE: line,
        fmt.EVENT: event,
    }


def _stamp(line: str, year: int, month: int) -> tuple | None:
    """(ts, severity, tid, file, line, message) of a line with a glog-like prefix, None for other lines."""
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


def _traceback_end(lines: list[str], start: int) -> int:
    """Where a traceback that starts at `start` ends: after its exception line (the first unindented one)."""
    for i in range(start + 1, len(lines)):
        if lines[i] and not lines[i][0].isspace():
            return i + 1
    return len(lines)
