"""NCCL's debug output (`NCCL_DEBUG=INFO`, `NCCL_DEBUG_FILE=%h.%p`: a file a process, named by host and pid),
read as records of the process's rank.

NCCL writes `host:pid:tid [cudaDev] NCCL INFO message`, and a warning as an empty line, then `host:pid:tid
[cudaDev] file.cc:line NCCL WARN message` (from 2.26 also `file.cc:line (function) NCCL WARN`). Before 2.26
no line carries a time; from 2.26 a warning starts with its local time in `NCCL_DEBUG_TIMESTAMP_FORMAT`'s
default form, `[2025-03-04 10:11:12] ` (any level can have it, with a fraction: `%Xf`). That form is read;
another format set by hand leaves the line untimed, placed as the reader of lines places untimed lines.

Nothing in the file's name says its rank: a communicator's init line does (`comm 0x55d0 rank 3 nranks 4
cudaDev 3 ... - Init START` / `Init COMPLETE`, from 2.19 led by `ncclCommInitRank`, `ncclCommInitRankConfig`
or `ncclCommSplit`). A process of a PyTorch job has a communicator per process group; its rank in the job
is its rank in the communicator with the most ranks, the default group's (the first of those, when several
are as large).
"""

from __future__ import annotations

import re
import time

# [time] host:pid:tid [cudaDev] [TRACE's ms] [file:line [(function)]] NCCL LEVEL message
_LINE = re.compile(
    r"(?:\[(?P<stamp>[^\]]*)\] )?(?P<event>[^\s:\[]+:\d+:(?P<tid>\d+) \[\d+\] (?:\d+\.\d+ )?"
    r"(?:(?P<file>[^\s:]+):(?P<line>\d+) (?:\([^)]*\) )?)?NCCL (?P<level>[A-Z]+)(?: |$))"
)
_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?")
_INIT = re.compile(rb"NCCL INFO (?:\w+ )?comm 0x[0-9a-fA-F]+ rank (\d+) nranks (\d+) ")
_SEVERITY = {"WARN": "E", "ATTN": "W", "ABORT": "E"}  # INFO, TRACE, CALL, VERSION: I; see parse


def looks_like(head: bytes) -> bool:
    """Whether a file starts as NCCL's debug file does: its first line that is not empty is NCCL's."""
    for line in head.splitlines():
        if line.strip():
            return _LINE.match(line.decode("utf-8", "replace")) is not None
    return False


def rank_of(data: bytes) -> int | None:
    """The process's rank in its largest communicator (see the module's docstring); None: no init line."""
    best: tuple[int, int] | None = None  # (nranks, rank)
    for match in _INIT.finditer(data):
        nranks = int(match.group(2))
        if best is None or nranks > best[0]:
            best = (nranks, int(match.group(1)))
    return best[1] if best else None


def parse(line: str) -> tuple[int | None, str, int, str | None, int | None, str] | None:
    """(time or None, severity, tid, source file, source line, event) of an NCCL line, None for other lines.
    The event is the line without its time: host, pid, device and level stay in it, as NCCL wrote them.
    A WARN is an error (E): NCCL warns when a call fails, and the error it returns says no more."""
    match = _LINE.match(line)
    if match is None:
        return None
    stamp, file, lineno = match["stamp"], match["file"], match["line"]
    ts = _epoch_us(stamp) if stamp is not None else None
    source = file.rpartition("/")[2] if file else None
    event = line[match.start("event") :]
    return ts, _SEVERITY.get(match["level"], "I"), int(match["tid"]), source, int(lineno) if lineno else None, event


def _epoch_us(stamp: str) -> int | None:
    """`2025-03-04 10:11:12[.123]` (this machine's time zone: NCCL writes local time) as epoch µs."""
    match = _TIME.fullmatch(stamp)
    if match is None:
        return None
    *fields, frac = match.groups()
    try:
        seconds = time.mktime((*map(int, fields), 0, 0, -1))
    except (OverflowError, ValueError):
        return None
    return int(seconds) * 1_000_000 + int(((frac or "") + "000000")[:6])
