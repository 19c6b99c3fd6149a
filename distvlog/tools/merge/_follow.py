"""`distvlog merge --follow PATH`: the merged timeline of a running job, printed as it grows.

Every rank file of the run directory is tailed: each poll reads what was appended and takes the whole
records in it (format 5: a record short of its `+lines` count, a line without its "\\n" or a line cut by NUL
padding is waited for, never printed). Reading stops at NUL padding with nothing after it: a sink that
reserves space grows in content, not in size, and the padding is overwritten later. A poll reads at most a
bite of each file, so memory stays a few bites per file whatever the backlog.

Records wait in their file's queue and are released in batches, in merge's order (clock-corrected time,
then rank, then file order), through merge's own filters: when every live rank has written past them (its
newest time, less how far back its threads' stamps have gone), or once they have waited `--delay` seconds;
never past a file that is not read to its end. A record older than one already printed is printed all the
same, with a field `late_us=N` (how far it is behind), so the output stays a valid glog timeline.

A rank is done when its end record (format.END_RECORD, or DIED: how it died, which `distvlog launch`
appends) is read or its process is gone (the meta record names host and pid; pids are checked on this
host only). The follow ends when every rank of the run is done,
when `stop()` says so (the launcher: the job exited), when no rank wrote for `--idle` seconds, or on Ctrl-C.
A file that shrinks or is replaced is read again from its start (said once).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ... import format as fmt
from ...errors import InputError
from ...wording import per_rank, plural, ranks_text
from ..output import write_all
from ..read import (
    STATIC_EVIDENCE,
    Record,
    from_glog,
    from_json,
    growing_evidence,
    matching,
    restamp,
    trim_left_by_the_dead,
)
from . import _filters
from ._collapse import Collapser
from ._collapsed import render
from ._tails import ALWAYS, CHECK_S, HOST, NEVER, RANK_FILE, Say, StaticTail, Tail, TextTail

LATE_FIELD = "late_us"
POLL_S = 0.1


class Follow:
    """The live merge of one run directory: `step()` reads and releases; `run()` until the job has ended."""

    def __init__(
        self,
        run_dir: Path,
        write: Callable[[bytes], None] | None,
        select: _filters.Select | None,
        *,
        take: Callable[[list[Record]], None] | None = None,
        wanted: re.Pattern[bytes] | None = None,
        jsonl: bool = False,
        collapse: bool = False,
        delay_s: float = 1.0,
        idle_s: float = 300.0,
        stop: Callable[[], bool] | None = None,
        say: Say,
    ) -> None:
        # `take`, instead of `write` and `select`: the records themselves, as read (`distvlog watch`); with
        # `wanted`, only W, E and F records and those whose glog text it finds (the others are not decoded)
        self.run_dir, self.write, self.select, self.jsonl, self.take = run_dir, write, select, jsonl, take
        self.wanted = wanted
        self.delay_s, self.idle_s, self.stop, self.say = delay_s, idle_s, stop, say
        self.tails: dict[str, Tail] = {}
        self._not_new: set[Path] = set()  # files under the run directory that are not news: followed or not evidence
        self.arrivals: deque[tuple[float, int]] = deque()  # (when read, newest time read then)
        self.due = NEVER  # records up to this time have waited long enough
        self.last_ts: int | None = None
        self.written = self.late = self.filtered = 0
        self.zone: int | None = None
        self.world = 0
        self._looked = -CHECK_S
        self._last_news = time.monotonic()
        self._all_done_at: float | None = None
        self.reason = ""
        self.collapse: Collapser | None = None
        self._collapsing = collapse

    # -- one poll ----------------------------------------------------------------------------------------
    def step(self, now: float) -> None:
        """Read a bite of what every file gained, and release what is due."""
        look = now - self._looked >= CHECK_S
        if look:
            self._looked = now
            self._find_files()
        for tail in self.tails.values():
            self._read(tail, now)
            if look and tail.check_process(now):
                self.say(f"rank {tail.rank} (pid {tail.meta.get('pid')}) is gone without its end record (killed?)")
                trim_left_by_the_dead([tail.path])
        self._release(self._cut(now))
        if self.collapse is not None:
            self._write_folded(self.collapse.expire(now))

    def drain(self, now: float) -> None:
        """The job has ended: read every file to its end, releasing in order as the files are read."""
        self._find_files()
        for tail in self.tails.values():
            tail.caught_up = False  # (whatever was written since its last poll is read too)
        while True:
            for tail in self.tails.values():
                if not tail.caught_up:
                    self._read(tail, now)
            behind = [t.frontier - t.slack for t in self.tails.values() if not t.caught_up]
            self._release(min(behind) if behind else ALWAYS)
            if not behind:
                break
        for tail in self.tails.values():
            tail.finish()

    def _read(self, tail: Tail, now: float) -> None:
        """Queue the records the file gained (one bite of it)."""
        newest = tail.poll(now)
        if newest is not None:
            self.arrivals.append((now, newest))
            self._last_news = now
        if tail.meta is not None:
            self.world = max(self.world, int(tail.meta.get("world_size") or 0))
        if tail.done and tail.caught_up:
            tail.finish()

    def _find_files(self) -> None:
        try:
            names = [p for p in self.run_dir.iterdir() if RANK_FILE.match(p.name)]
        except OSError:
            return
        for path in sorted(names, key=lambda p: p.name):
            if path.name not in self.tails:
                self.tails[path.name] = Tail(path, self.say)
        for path, reader, rank in growing_evidence(self.run_dir, self._not_new):
            key = str(path.relative_to(self.run_dir))
            if reader in STATIC_EVIDENCE:
                self.tails[key] = StaticTail(path, self.say, reader, rank)
            elif rank is not None:
                self.tails[key] = TextTail(path, self.say, rank)
            else:
                continue  # (an NCCL file before its init line: looked at again)
            self._not_new.add(path)

    def _cut(self, now: float) -> int:
        """Records up to this time can go. A file not read to its end holds back what it may still hold
        (never overtaken: following a long backlog stays in order). A live rank read to its end holds back
        what it has not written past, until the delay; so do ranks not seen yet, and files whose meta record
        is not read yet (their time zone, year and clock are unknown)."""
        while self.arrivals and now - self.arrivals[0][0] >= self.delay_s:
            self.due = max(self.due, self.arrivals.popleft()[1])
        tails = self.tails.values()
        behind = [t.frontier - t.slack for t in tails if not t.caught_up]
        live = [t.frontier - t.slack for t in tails if t.caught_up and not t.done]
        unknown = not tails or len({t.rank for t in tails}) < self.world or any(t.meta is None for t in tails)
        cut = max(NEVER if unknown else min(live, default=ALWAYS), self.due)
        return min(cut, *behind) if behind else cut

    def _release(self, cut: int) -> None:
        """Write the queued records up to time `cut`, in order: time, then rank (file), then file order.
        With `take`: every queued record at once, each file's in file order."""
        if self.take is not None:
            for tail in sorted((t for t in self.tails.values() if t.queue_ts), key=lambda t: t.order):
                ts, _, texts, objs = tail.take(ALWAYS)
                batch = _Batch(ts, [tail] * len(ts), texts, objs or [None] * len(ts))
                kept = range(len(batch)) if self.wanted is None else np.flatnonzero(_wanted(batch, self.wanted))
                self.take([batch.record(i) for i in kept])
            return
        tails = sorted((t for t in self.tails.values() if t.queue_ts), key=lambda t: t.order)
        taken = [(tail, got) for tail in tails if len((got := tail.take(cut))[0])]
        if not taken:
            return
        ts = np.concatenate([got[0] for _, got in taken])
        which = np.repeat(np.arange(len(taken)), [len(got[0]) for _, got in taken])
        order = np.lexsort((np.concatenate([got[1] for _, got in taken]), which, ts))
        picked = which[order].tolist()
        batch = _Batch(
            ts[order],
            [taken[w][0] for w in picked],
            _gather([got[2] for _, got in taken], which, order),
            _gather([got[3] for _, got in taken], which, order),
        )
        if self.zone is None:
            self.zone = int((batch.tails[0].meta or {}).get("utc_offset_s") or time.localtime().tm_gmtoff)
            self.select.prepare(int(batch.ts[0]), self.zone)
        kept = self.select(batch)
        self.filtered += len(batch) - len(kept)
        if len(kept) and self._collapsing:
            self._fold(batch, kept)
        elif len(kept):
            self.write(self._output(batch, kept))

    def _fold(self, batch: _Batch, kept: np.ndarray) -> None:
        """--collapse: the kept records into the folding, and what it releases to the output. A group waits
        for its ranks at most a little longer than a record waits to be printed."""
        if self.collapse is None:
            ranks = {t.rank for t in self.tails.values()} | set(range(self.world))
            self.collapse = Collapser(ranks, wait_s=self.delay_s + CHECK_S)
        ts = batch.ts[kept]
        texts = [batch.texts[i] for i in kept.tolist()]
        stamped, starts, lengths = _stamped(texts, ts + self.zone * 1_000_000)
        self.written += len(kept)
        released = []
        for j, i in enumerate(kept.tolist()):
            text = stamped[starts[j] : starts[j] + lengths[j]]
            released += self.collapse.add(text, int(ts[j]), int(batch.rank[i]))
        self._write_folded(released)

    def _write_folded(self, released: list) -> None:
        if released:
            self.write(render(released, self.jsonl, self.world or None))

    def flush(self) -> None:
        """Write what the folding still holds (the follow has ended)."""
        if self.collapse is not None:
            self._write_folded(self.collapse.flush())

    def _output(self, batch: _Batch, kept: np.ndarray) -> bytes:
        """The kept records of a batch as output: glog text stamped with their corrected times in the output's
        zone (or JSON lines); those older than a record already written (the first ones) marked late."""
        ts = batch.ts[kept]
        late = np.maximum(self.last_ts - ts, 0) if self.last_ts is not None else np.zeros(len(kept), np.int64)
        self.last_ts = max(self.last_ts or NEVER, int(ts[-1]))
        self.written += len(kept)
        self.late += int(np.count_nonzero(late))
        if self.jsonl:
            out = []
            for i, lag in zip(kept.tolist(), late.tolist()):
                obj = batch.record(i).as_json((batch.tails[i].meta or {}).get("world_size"))
                if lag:
                    obj[LATE_FIELD] = lag
                out.append(fmt.json_record(obj))
            return b"".join(out)
        texts = [batch.texts[i] for i in kept.tolist()]
        stamped, starts, lengths = _stamped(texts, ts + self.zone * 1_000_000)
        if not late.any():
            return stamped
        pieces = [stamped[a : a + n] for a, n in zip(starts, lengths)]
        return b"".join(_marked(text, lag) if lag else text for text, lag in zip(pieces, late.tolist()))

    # -- the loop ------------------------------------------------------------------------------------------
    def ended(self, now: float) -> bool:
        """Whether the job has ended; sets `reason`."""
        if self.stop is not None and self.stop():
            self.reason = "the job exited"
            return True
        if now - self._last_news >= self.idle_s:
            self.reason = f"no rank wrote for {self.idle_s:g} s"
            return True
        tails = [t for t in self.tails.values() if t.ends]  # (other programs' files say no end: --idle does)
        if not tails or not all(t.done and t.caught_up for t in tails):
            self._all_done_at = None
            return False
        if len({t.rank for t in tails}) < self.world:  # a rank yet to write its first record?
            self._all_done_at = self._all_done_at or now
            if now - self._all_done_at < self.delay_s + CHECK_S:
                return False
        gone = [t.rank for t in tails if t.gone and not t.ended]
        self.reason = "every rank ended" + (f" ({ranks_text(gone)} without its end record)" if gone else "")
        return True

    def run(self) -> None:
        while True:
            now = time.monotonic()
            if self.ended(now):
                self.drain(now)
                return
            self.step(now)
            time.sleep(POLL_S)

    def close(self) -> None:
        for tail in self.tails.values():
            tail.close()

    def summary(self) -> str:
        counts = {t.rank: 0 for t in self.tails.values()}
        for tail in self.tails.values():
            counts[tail.rank] += tail.records
        read = per_rank(counts) if counts else "none"
        parts = [f"{plural(self.written, 'record')} from {plural(len(self.tails), 'file')} ({read})"]
        if self.filtered:
            parts.append(f"{self.filtered:,} filtered out")
        torn = sum(t.torn for t in self.tails.values())
        skipped = sum(t.skipped for t in self.tails.values())
        if torn:
            parts.append(f"{plural(torn, 'torn record')} skipped")
        if skipped:
            parts.append(f"{plural(skipped, 'stray line')} skipped")
        if self.late:
            parts.append(f"{plural(self.late, 'record')} printed late (marked {LATE_FIELD}=N)")
        if self.collapse is not None:
            parts.append(self.collapse.summary())
        return "; ".join(parts)


class _Batch:
    """Released records in output order, with the columns merge's filters (`Select`) read off a Block."""

    def __init__(self, ts: np.ndarray, tails: list[Tail], texts: list[bytes], objs: list) -> None:
        self.ts, self.tails, self.texts, self.objs = ts, tails, texts, objs
        self.rank = np.fromiter((t.rank for t in tails), np.int64, len(tails))
        self.severity = np.frombuffer(bytes(t[0] for t in texts), np.uint8)

    def __len__(self) -> int:
        return len(self.texts)

    def matching(self, pattern: re.Pattern[bytes]) -> np.ndarray:
        ends = np.cumsum([len(t) for t in self.texts]).tolist()
        return matching(b"".join(self.texts), [0, *ends[:-1]], ends, pattern)

    def record(self, i: int) -> Record:
        ts, rank, obj = int(self.ts[i]), int(self.rank[i]), self.objs[i]
        path = self.tails[i].path
        return from_json(obj, ts, rank, path) if obj is not None else from_glog(self.texts[i], ts, rank, path)


def _stamped(texts: list[bytes], stamps: np.ndarray) -> tuple[bytes, list[int], list[int]]:
    """The records' glog texts joined, each stamped with its time (epoch µs in the output's zone); where each
    starts and how long it is."""
    data = np.frombuffer(bytearray(b"".join(texts)), np.uint8)
    lengths = np.fromiter(map(len, texts), np.int64, len(texts))
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    restamp(data, starts, stamps)
    return data.tobytes(), starts.tolist(), lengths.tolist()


def _wanted(batch: _Batch, pattern: re.Pattern[bytes]) -> np.ndarray:
    """W, E and F records, and those `pattern` finds."""
    return (batch.severity != ord("I")) | batch.matching(pattern)


def _gather(parts: list[list], which: np.ndarray, order: np.ndarray) -> list:
    """The items of the lists in `parts` (an empty list: None for each of its records), in the order
    `order` picks them from their concatenation (`which`: the list each record is from)."""
    counts = np.bincount(which, minlength=len(parts))
    flat = [item for part, n in zip(parts, counts.tolist()) for item in (part or [None] * n)]
    return [flat[i] for i in order.tolist()]


def _marked(text: bytes, late_us: int) -> bytes:
    """A record with the field `late_us=N` added as its last field (before a `+lines` count): a plain
    message never ends in a field (format 2.4), so the record reads back as the same record plus that field."""
    first, nl, rest = text.partition(b"\n")
    count_at = first.rfind(fmt.COUNT_TEXT.encode()) if fmt.declared_count(first) else len(first)
    return first[:count_at] + f" {LATE_FIELD}={late_us}".encode() + first[count_at:] + nl + rest


# -- the command ---------------------------------------------------------------------------------------------
def resolve_run(path: str) -> Path:
    """The run directory PATH names: itself, a log root's `latest` run, or (`latest`) the default log root's."""
    given = Path(path)
    if path == "latest" and not given.exists():
        from ...logger import log_dir

        given = log_dir() / "latest"
    if not given.is_dir():
        raise InputError(
            f"{path}: {'not a directory' if given.exists() else 'no such directory'} (--follow reads a run directory)"
        )
    if any(RANK_FILE.match(p.name) for p in given.iterdir()) or next(growing_evidence(given, set()), None):
        return given.resolve()
    if (given / "latest").is_dir():
        return (given / "latest").resolve()
    if any(p.is_dir() for p in given.iterdir()):
        raise InputError(f"{path}: a log root without a latest run; give the run directory to follow")
    return given.resolve()  # a run directory whose ranks have not written yet


def follow(args: argparse.Namespace, stop: Callable[[], bool] | None = None) -> int:
    """`merge --follow` (args: merge's), until the job ends (0; also once `stop()` is true) or Ctrl-C (130)."""
    if len(args.paths) != 1:
        raise InputError(f"--follow reads one run directory, not {len(args.paths)} paths")
    if args.rank_of:
        raise InputError("--rank-of is for foreign files; --follow reads a run's rank files")
    run_dir = resolve_run(args.paths[0])
    select = _filters.Select(args)

    def say(text: str) -> None:
        print(f"distvlog merge: {text}", file=sys.stderr, flush=True)

    say(f"following {run_dir}")
    with _Output(args.output, run_dir, header=args.format == "text") as out:
        live = Follow(
            run_dir,
            out.write,
            select,
            jsonl=args.format == "jsonl",
            collapse=args.collapse,
            delay_s=args.delay,
            idle_s=args.idle,
            stop=stop,
            say=say,
        )
        try:
            live.run()
            live.flush()
        except KeyboardInterrupt:
            live.flush()
            say(f"interrupted; {live.summary()}")
            return 130
        finally:
            live.close()
    say(f"{live.reason}; {live.summary()}")
    return 0


class _Output:
    """Where follow writes: standard output or a file written as it grows; for glog text, a header first
    (so that tools read it back as a merged timeline) unless a person watches a terminal."""

    def __init__(self, path: str | None, run_dir: Path, header: bool) -> None:
        self.path, self.run_dir, self.header = path, run_dir, header
        self.fd = -1

    def __enter__(self) -> _Output:
        if self.path in (None, "-"):
            sys.stdout.flush()
            self.fd = sys.stdout.fileno()
        else:
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise InputError(f"-o {self.path}: cannot write there ({exc.strerror})") from None
        if self.header and not os.isatty(self.fd):
            self._header()
        return self

    def _header(self) -> None:
        created = time.strftime("%Y/%m/%d %H:%M:%S")
        what = f"follow of {self.run_dir}, clocks corrected to rank 0"
        self.write(
            f"{fmt.HEADER_CREATED}{created}\n{fmt.HEADER_MACHINE}{HOST}\n{fmt.MERGED_MARK} {what}\n"
            f"{fmt.HEADER_FORMAT}\n".encode()
        )

    def write(self, data: bytes) -> None:
        write_all(self.fd, data)

    def __exit__(self, *exc: object) -> None:
        if self.path not in (None, "-"):
            os.close(self.fd)
