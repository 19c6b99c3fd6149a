"""A file of a running job as it grows, read into records queued for `merge --follow` (_follow): our rank
files (see _follow's docstring for how they are read), and other programs' evidence beside them: text
(torchrun's worker output, Paddle's workerlog.N, NCCL's debug file) read line by line as it grows, as the
reader of such files reads it whole, and files written once (Flight Recorder dumps, profiler traces,
torchrun's error.json), read whole once their size holds still. Their records are queued as JSON-lines
records: they carry no header, no clock of ours and no end record.
"""

from __future__ import annotations

import calendar
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ... import format as fmt
from ...errors import InputError
from ..read import Clock, evidence_objects, line_reader

_COUNT = fmt.COUNT_TEXT.encode()
READ_BYTES = 256 << 10  # read at most this much of a file per poll: memory is a bite per file, whatever the backlog
PADDING_BITES = 64  # how much padding one check scans for data after it (bites)
NEVER, ALWAYS = -(1 << 62), 1 << 62  # times before and after any record
HEAD_BYTES = 64 << 10  # the header and meta record are in the first bytes
GRACE_S = 0.5  # how long a rank's pid must stay gone before its file is done
CHECK_S = 1.0  # how often to look for new files, re-read clock slots and ask whether a rank's pid lives
_END = fmt.own_record_pattern(fmt.END_RECORD)
# How a rank died, appended to its file by `distvlog launch`'s parent of the rank (format 2.8).
_DIED = re.compile(
    re.escape(f" {fmt.OWN_FILE}:{fmt.OWN_LINE}] ".encode()) + rb"\[rank \d+\] " + re.escape(fmt.DIED.encode())
)
RANK_FILE = re.compile(rf"^{fmt.RANK_FILE_NAME.pattern}$")
_NOT_NUL = re.compile(rb"[^\0]")
HOST = socket.gethostname()
_NO_STAMP = "0101 00:00:00.000000"  # (a JSON-lines record's glog text, until it is stamped at its release)
Say = Callable[[str], None]


class Tail:
    """One rank file as it grows: the whole records appended since the last poll."""

    ends = True  # whether the file says when its rank is done (an end record, a pid): only ours do

    def __init__(self, path: Path, say: Say, rank: int | None = None) -> None:
        self.path, self.say = path, say
        self.rank = rank if rank is not None else int(RANK_FILE.match(path.name).group(1))
        self.fd = -1
        self.ino = None
        self.at = 0  # where the next read starts
        self.buf = b""  # the start of a record not yet whole (bytes before `at`)
        self.meta: dict | None = None
        self.kind = "jsonl" if path.suffix == ".jsonl" else "glog"
        self.clock = Clock()
        self.frontier = NEVER  # the newest time read from this file
        self.caught_up = False  # the last poll read to the end of the file
        self.slack = 0  # how far back a record has gone behind the frontier
        self.ended = self.gone = False
        self.records = self.torn = self.skipped = 0
        # Records read, not yet released: their time, glog text (JSON lines turned into it) and, for JSON
        # lines, the object (decoded as it was written).
        self.queue_ts: list[int] = []
        self.queue_text: list[bytes] = []
        self.queue_obj: list[dict] = []
        self._seconds: dict[bytes, int] = {}
        self._checked = self._padding_checked = 0.0
        self._missing_since: float | None = None

    @property
    def order(self) -> tuple[int, str]:
        return self.rank, self.path.name

    @property
    def done(self) -> bool:
        return self.ended or self.gone

    # -- reading -------------------------------------------------------------------------------------------
    def _open(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        if self.fd >= 0:
            os.close(self.fd)
        self.fd, self.ino = fd, os.fstat(fd).st_ino
        self.at, self.buf = 0, b""
        return True

    def _restarted(self) -> bool:
        """Whether the file was truncated or replaced since the last read: then read it from its start."""
        try:
            size = os.fstat(self.fd).st_size
            replaced = os.stat(self.path).st_ino != self.ino
        except OSError:
            return False
        if size >= self.at and not replaced:
            return False
        self.say(f"{self.path.name} was {'replaced' if replaced else 'truncated'}: reading it again from its start")
        if replaced:
            self._open()
        self.at, self.buf, self.meta = 0, b"", None
        self.ended = self.gone = False
        return True

    def poll(self, now: float) -> int | None:
        """Queue the records made whole since the last poll; the newest time among them (None: none)."""
        if self.fd < 0 and not self._open():
            self.caught_up = True
            return None
        self._restarted()
        data = os.pread(self.fd, READ_BYTES, self.at)
        full = len(data) == READ_BYTES
        if self.meta is None or now - self._checked >= CHECK_S:
            self._read_head(now)
        if not data:
            self.caught_up = True
            return None
        whole = self.buf + data
        base = self.at - len(self.buf)
        out: list[bytes] = []
        pos = 0
        # Padding (NULs) followed by data was left by a writer that is gone: its start cut a record (torn),
        # its end starts a new line. Padding to the end of the file is space being written: wait there.
        while (nul := whole.find(b"\0", pos)) >= 0:
            after = _NOT_NUL.search(whole, nul)
            resume = base + after.start() if after else self._past_padding(base + len(whole), now) if full else None
            if resume is None:
                pos = self._records(whole, pos, nul, out)
                self.at, self.buf, self.caught_up = base + nul, whole[pos:nul], True
                break
            self._records(whole, pos, nul, out, cut=True)
            if after is None:  # (the data is beyond this bite)
                self.at, self.buf, self.caught_up = resume, b"", False
                break
            pos = after.start()
        else:
            pos = self._records(whole, pos, len(whole), out)
            self.at, self.buf, self.caught_up = base + len(whole), whole[pos:], not full
        return self._queue(out)

    def _past_padding(self, start: int, now: float) -> int | None:
        """Where data follows a run of padding longer than a bite, None if padding runs to the end of the file.
        Holes are skipped (SEEK_DATA); padding written as NULs is scanned, a bounded stretch per check."""
        if now - self._padding_checked < CHECK_S:
            return None
        self._padding_checked = now
        at = start
        for _ in range(PADDING_BITES):
            try:
                at = os.lseek(self.fd, at, os.SEEK_DATA)
            except OSError:  # no data past `at`
                return None
            chunk = os.pread(self.fd, READ_BYTES, at)
            if not chunk:
                return None
            found = _NOT_NUL.search(chunk)
            if found:
                return at + found.start()
            at += len(chunk)
        return None

    def _records(self, data: bytes, pos: int, end: int, out: list[bytes], cut: bool = False) -> int:
        """Append the whole records of data[pos:end] to `out`; returns where the first one not yet whole
        starts (when `cut`, padding follows: what is left there is torn)."""
        tried_to = pos  # the lines up to here are no run of one-line records: read one by one
        while True:
            if self.kind != "jsonl" and pos >= tried_to:
                pos, tried_to = self._one_line_run(data, pos, end, out)
            if (nl := data.find(b"\n", pos, end)) < 0:
                break
            if self.kind == "jsonl" or not fmt.RECORD_START.match(data, pos):
                self._take_line(data[pos : nl + 1], out)
                pos = nl + 1
                continue
            stop, whole = fmt.continuation_end(data, nl + 1, end, fmt.declared_count(data[pos:nl]))
            if whole is None:  # short of its count: wait for the rest
                break
            if whole:
                out.append(data[pos:stop])
            else:
                self.torn += 1
            pos = stop
        if cut and pos < end:
            self.torn += 1
            return end
        return pos

    @staticmethod
    def _one_line_run(data: bytes, pos: int, end: int, out: list[bytes]) -> tuple[int, int]:
        """Take the records from `pos` up to the next line that declares continuation lines when each of
        those lines is a whole record (most lines: in bulk); (where the reading goes on, where this ended)."""
        counted = data.find(_COUNT, pos, end)
        stop = data.rfind(b"\n", pos, end if counted < 0 else counted) + 1
        whole = fmt.one_line_records(data[pos:stop]) if stop > pos else None
        if whole is None:
            return pos, max(stop, pos + 1)
        out += whole
        return stop, stop

    def _take_line(self, line: bytes, out: list[bytes]) -> None:
        """A line that does not start a glog record: a JSON-lines record, a header line, or a stray line
        (not part of any record, format 5)."""
        if self.kind == "jsonl" and fmt.parse_json(line) is not None:
            out.append(line)
        elif line.strip(b"\r\n") and (self.kind == "jsonl" or not fmt.is_header_line(line)):
            self.skipped += 1

    def _read_head(self, now: float) -> None:
        """The meta record (rank, host, pid, year, time zone) and its clock slots, which the rank rewrites
        in place once measured."""
        self._checked = now
        meta = fmt.meta_of_head(os.pread(self.fd, HEAD_BYTES, 0))
        if meta is not None:
            self.meta = meta
            self.clock = Clock.from_meta(meta)

    def _queue(self, texts: list[bytes]) -> int | None:
        if not texts:
            return None
        if self.kind == "jsonl":
            objs = [fmt.parse_json(t) for t in texts]
            raw = [o.get(fmt.TS) if type(o.get(fmt.TS)) is int else 0 for o in objs]
            texts = [fmt.json_to_glog(o, self.rank, _NO_STAMP).encode() for o in objs]
            self.queue_obj += objs
        else:
            raw = [self._epoch_us(t) for t in texts]
        ts = self.clock.correct(np.array(raw, np.int64))
        # The meta record is stamped when the file is made, after the first record was: it does not count.
        counted = ts[1:] if not self.records and fmt.META_EVENT.encode() in texts[0][:200] else ts
        if len(counted):
            running = np.maximum.accumulate(np.append(self.frontier, counted))
            self.slack = max(self.slack, int((running[1:] - counted).max()))
            self.frontier = int(running[-1])
        joined = b"".join(texts)
        if _END.search(joined) or _DIED.search(joined):
            self.ended = True
        self.queue_ts += ts.tolist()
        self.queue_text += texts
        self.records += len(texts)
        return int(ts.max())

    def take(self, cut: int) -> tuple[np.ndarray, np.ndarray, list[bytes], list[dict]]:
        """The queued records up to time `cut`: their times, places in the file's queue, texts, objects."""
        ts = np.array(self.queue_ts, np.int64)
        taken = ts <= cut
        if taken.all():
            out = (ts, np.arange(len(ts)), self.queue_text, self.queue_obj)
            self.queue_ts, self.queue_text, self.queue_obj = [], [], []
            return out
        picked, left = np.flatnonzero(taken).tolist(), np.flatnonzero(~taken).tolist()
        texts, objs = self.queue_text, self.queue_obj
        out = (
            ts[picked],
            np.array(picked, np.int64),
            [texts[i] for i in picked],
            [objs[i] for i in picked] if objs else [],
        )
        self.queue_ts = ts[left].tolist()
        self.queue_text = [texts[i] for i in left]
        self.queue_obj = [objs[i] for i in left] if objs else []
        return out

    def _epoch_us(self, text: bytes) -> int:
        """A glog stamp (the writer's local time, no year) as epoch µs: the year and zone from the meta record."""
        second = text[1:14]
        epoch = self._seconds.get(second)
        if epoch is None:
            created = str((self.meta or {}).get("created", "")) or time.strftime("%Y-%m")
            year, month = int(created[:4]), int(created[5:7])
            mm, dd = int(second[:2]), int(second[2:4])
            hh, mi, ss = int(second[5:7]), int(second[8:10]), int(second[11:13])
            epoch = calendar.timegm((year + (mm < month), mm, dd, hh, mi, ss))
            epoch -= int((self.meta or {}).get("utc_offset_s") or time.localtime().tm_gmtoff)
            self._seconds[second] = epoch
        return epoch * 1_000_000 + int(text[15:21])

    # -- liveness ------------------------------------------------------------------------------------------
    def check_process(self, now: float) -> bool:
        """Whether the rank's process has just been found gone: its pid on this host no longer runs, at two
        checks at least GRACE_S apart (`distvlog launch`'s parent of a rank that died appends how in between).
        What it left is read by the caller."""
        if self.done or self.meta is None or self.meta.get("host") != HOST:
            return False
        pid = self.meta.get("pid")
        if type(pid) is not int or alive(pid):
            self._missing_since = None
            return False
        if self._missing_since is None:
            self._missing_since = now
        if now - self._missing_since < GRACE_S:
            return False
        self.gone = True
        return True

    def finish(self) -> None:
        """No more is coming: a record left unfinished is torn."""
        if self.buf:
            self.torn += 1
            self.buf = b""

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def alive(pid: int) -> bool:
    """Whether pid runs (a zombie does not: it has exited and waits for its parent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"


class TextTail(Tail):
    """Another program's text file as it grows: its whole lines, read as the line reader reads a whole file
    (the time an untimed line takes carries over; a traceback waits for its exception line). Such a file
    has no end record: it is followed until the follow ends."""

    ends = False

    def __init__(self, path: Path, say: Say, rank: int) -> None:
        super().__init__(path, say, rank)
        self.kind = "jsonl"
        self.lines = line_reader(rank, path.name, time.time_ns() // 1000)

    def _read_head(self, now: float) -> None:
        self._checked, self.meta = now, {}

    def _restarted(self) -> bool:
        restarted = super()._restarted()
        if restarted:
            self.lines = line_reader(self.rank, self.path.name, time.time_ns() // 1000)
        return restarted

    def _records(self, data: bytes, pos: int, end: int, out: list[bytes], cut: bool = False) -> int:
        raw = data[pos : data.rfind(b"\n", pos, end) + 1].split(b"\n")[:-1]
        if not raw:
            return pos
        texts = [line.decode("utf-8", "replace").rstrip("\r") for line in raw]
        objs, used = self.lines.feed(texts, time.time_ns() // 1000, final=False)
        out += [fmt.json_record(obj) for obj in objs]
        return pos + sum(len(line) + 1 for line in raw[:used])


class StaticTail(Tail):
    """A file written once: read whole when its size is the same at two polls (it may be found while
    being written), then done. What its reader refuses is said in one line and read as nothing. Being
    read says nothing of the job's end: the follow does not end for it."""

    ends = False

    def __init__(self, path: Path, say: Say, reader: str, rank: int | None) -> None:
        super().__init__(path, say, -1 if rank is None else rank)  # (a profiler trace says its rank)
        self.kind, self.reader, self.given = "jsonl", reader, rank
        self._size = -1

    def poll(self, now: float) -> int | None:
        if self.ended:
            self.caught_up = True
            return None
        self.meta = self.meta or {}
        try:
            size = self.path.stat().st_size
        except OSError:
            size = 0
        held, self._size = size == self._size, size
        self.caught_up = held and size == 0  # (empty: nothing to read yet)
        if not held or size == 0:
            return None
        self.ended = self.caught_up = True
        try:
            objs, notes = evidence_objects(self.path, self.reader, self.given)
        except InputError as exc:
            self.say(str(exc))
            return None
        for note in notes:
            self.say(note)
        if objs:
            self.rank = objs[0][fmt.RANK]
        return self._queue([fmt.json_record(obj) for obj in objs])
