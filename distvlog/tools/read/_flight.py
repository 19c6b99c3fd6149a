"""PyTorch Flight Recorder dumps (pickle or JSON), read as records of the rank that dumped them.

A dump is one process's ring buffer of its last collectives, every process group's in one list, oldest
first (/work/shared/reference/evidence-formats.md). Each entry becomes a record at its creation time,
`FR_ENQUEUED`, with the fields below, and one more at its start and completion times where the dump knows
them (NCCL with timing on; gloo leaves them out). The dump itself is a last record, `FR_DUMP`, at the time
the file was written: its version, the process groups with their ranks, the groups' last enqueued /
started / completed sequence ids, how many entries it holds and whether it was cut short.

Entries are read by which fields they have, not by the dump's version: fields were added over 2.x.
A record's file:line is the first Python frame outside torch and distvlog that issued the collective
(pickle dumps with stacks), else `flight_recorder:0`.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ... import format as fmt
from . import _unpickle

TESTED_VERSIONS = ("2.10",)  # what torch 2.13 writes; older versions have fewer fields, read by presence
_KEYS = (b"pg_config", b"pg_status", b"entries", b"comm_lib_version", b"nccl_comm_state")
_NO_FRAME = ("flight_recorder", 0)
_SEQ, _ID = 1 << 64, (1 << 64) + 1  # stand-ins for a record's ids in its shape's text (no column holds them)
_FRAMES_KEPT = 8
_OWN = re.compile(r"/torch/|" + re.escape(str(Path(__file__).parents[2])))  # torch's frames and ours


class NotADump(ValueError):
    """Bytes that are not a Flight Recorder dump."""


def looks_like(head: bytes) -> bool:
    """Whether a file's first bytes are a dump's: a pickle or a JSON object that names a dump's keys."""
    start = head.lstrip()[:1]
    if head[:1] == b"\x80" or start == b"{":
        window = head[:4096]
        return sum(key in window for key in _KEYS) >= 2 or (start == b"{" and b'"entries":' in window[:64])
    return False


def load(data: bytes) -> tuple[dict[str, Any], bool]:
    """The dump as a dict and whether it was cut short. Raises NotADump, or _unpickle.Refused."""
    cut = False
    if data[:1] == b"\x80":
        try:
            obj = _unpickle.loads(data)
        except _unpickle.Refused:
            raise
        except ValueError as exc:
            raise NotADump(str(exc)) from None
        if isinstance(obj, _unpickle.Cut):
            obj, cut = obj.obj, True
    else:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            try:
                obj = json.loads(data)  # (what orjson refuses and JSON allows: an integer past 64 bits)
            except (ValueError, RecursionError):
                obj, cut = _json_cut(data), True
    if not isinstance(obj, dict) or not ({"entries", "pg_config", "version"} & obj.keys()):
        raise NotADump("not a Flight Recorder dump (no entries, pg_config or version)")
    return obj, cut


_ENTRIES = re.compile(rb'"entries"\s*:\s*\[')


def _json_cut(data: bytes) -> dict[str, Any] | None:
    """A JSON dump cut short: its whole entries (torch writes keys sorted, `entries` before `pg_config`)."""
    match = _ENTRIES.search(data)
    if match is None:
        return None
    text, at, entries = data.decode("utf-8", "replace"), match.end(), []
    decoder = json.JSONDecoder()
    while True:
        at = len(text) - len(text[at:].lstrip(" \n\r\t,"))
        try:
            entry, at = decoder.raw_decode(text, at)
        except (ValueError, RecursionError):
            break
        entries.append(entry)
    return {"entries": entries}


def version_note(dump: dict[str, Any]) -> str | None:
    """A warning for a dump of a version newer than those tested (its known fields are read all the same)."""
    version = dump.get("version")
    if version is None:
        return None
    if not _numeric(version) or _numeric(version) > max(map(_numeric, TESTED_VERSIONS)):
        tested = ", ".join(TESTED_VERSIONS)
        return f"Flight Recorder dump version {version!r} is newer than those tested ({tested}); reading what it shares"
    return None


def _numeric(version: Any) -> tuple[int, ...]:
    parts = str(version).split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()


def groups(dump: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{group name: {"desc", "ranks"}} from `pg_config` (ranks are a string like "[0, 1]" in every version)."""
    out = {}
    config = dump.get("pg_config")
    for key, value in config.items() if isinstance(config, dict) else ():
        if isinstance(value, dict):
            ranks = _ranks(str(value.get("ranks", "")))
            out[str(value.get("name", key))] = {"desc": str(value.get("desc", "")), "ranks": ranks}
    return out


_RANK = re.compile(r"[0-9]{1,18}")
_RANKS_KEPT = 256
_ranks_lists: dict[str, list[int]] = {}


def _ranks(text: str) -> list[int]:
    """A group's ranks from their text, one list for equal texts: a thousand dumps name the same groups of a
    thousand ranks (~40 KB each as a list of ints)."""
    ranks = _ranks_lists.get(text)
    if ranks is None:
        if len(_ranks_lists) >= _RANKS_KEPT:
            _ranks_lists.clear()
        ranks = _ranks_lists[text] = [int(r) for r in _RANK.findall(text)]
    return ranks


class Dump:
    """A dump read into columns: each entry's times and ids in arrays, and what entries share (group, op,
    sizes, dtypes, state, thread, the issuing frames: a few shapes for thousands of entries) in a table.
    An entry takes ~22 bytes (its times kept as µs after the dump's first creation or its own); records are
    made from it a few at a time."""

    def __init__(self, dump: dict[str, Any], cut: bool, rank: int, dumped_us: int) -> None:
        entries = dump.get("entries")
        entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
        found = groups(dump)
        self.rank = rank
        self.world = max((len(g["ranks"]) for g in found.values() if g["ranks"]), default=None)
        self.shapes: list[Shape] = []
        self._templates: dict[tuple[int, str], list[bytes] | None] = {}
        created, started, completed, seq, record_id, duration, shape, self.skipped = _rows(
            entries, rank, self.world, self.shapes
        )
        self.base = min(created, default=0)  # µs: entries' creation times are kept after it
        self._created = _column([c - self.base for c in created])
        self.started, self.completed = _column(started), _column(completed)  # µs after creation
        self.seq, self.record_id = _column(seq), _column(record_id)
        self.duration = None if all(d is None for d in duration) else np.array(duration, np.float64)  # NaN: none
        self.shape = np.array(shape, np.int16 if len(self.shapes) <= 1 << 15 else np.int32)
        at = self.created()
        last = max(
            [int(at.max(initial=0))]
            + [int((at + after)[after != _absent(after)].max(initial=0)) for after in (self.started, self.completed)]
        )
        status = dump.get("pg_status")
        self.meta: dict[str, Any] = {  # the dump's own record: its last, at the time the file was written
            fmt.TS: max(dumped_us, last),
            fmt.SEVERITY: "W" if cut else "I",
            fmt.RANK: rank,
            fmt.WORLD_SIZE: self.world,
            fmt.TID: 0,
            fmt.FILE: _NO_FRAME[0],
            fmt.LINE: 0,
            fmt.EVENT: fmt.FR_DUMP,
            "version": str(dump.get("version", "")),
            "world": self.world,  # a field too: the reader keeps no record's world_size
            "entries": len(entries),
            "cut": cut,
            "groups": found,
            "status": status if isinstance(status, dict) else {},
        }

    def __len__(self) -> int:
        """How many entries it holds."""
        return len(self.shape)

    def records_count(self, start: int = 0, stop: int | None = None) -> int:
        """How many records `records(start, stop)` makes (of it all by default)."""
        stop = len(self) if stop is None else stop
        times = (np.count_nonzero(c[start:stop] != _absent(c)) for c in (self.started, self.completed))
        return len(self.shape[start:stop]) + sum(map(int, times)) + (stop >= len(self))

    def created(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Entries' creation times (epoch µs, int64)."""
        return self.base + self._created[start:stop].astype(np.int64)

    def seqs(self, absent: int) -> np.ndarray:
        """Every entry's sequence id (int64), `absent` where it gives none."""
        return np.where(self.seq == _absent(self.seq), absent, self.seq).astype(np.int64)

    def completions(self) -> np.ndarray:
        """Whether each entry's completion is known (NCCL with timing on)."""
        return self.completed != _absent(self.completed)

    def records(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Entries start..stop as our JSON-lines records (format, section 3.1), each followed by its start and
        completion where known; after the last entry, the dump's own record."""
        out = [self._record(*each) for each in self._each(start, stop)]
        if stop >= len(self):
            out.append(self.meta)
        return out

    def texts(self, start: int, stop: int, stamp: str) -> list[bytes]:
        """The glog text of `records(start, stop)`, as `format.json_to_glog` writes it with `stamp` for the
        time: from each shape's text with the record's ids put in (a record without ids written whole)."""
        out = []
        for each in self._each(start, stop):
            kind, shape, _, seq, rid, took = each
            parts = self._template(shape, kind, stamp) if seq is not None and rid is not None and took is None else None
            if parts is None:
                out.append(fmt.json_to_glog(self._record(*each), self.rank, stamp).encode("utf-8", "backslashreplace"))
            elif kind == fmt.FR_ENQUEUED:
                out.append(b"%b%d%b%d%b" % (parts[0], seq, parts[1], rid, parts[2]))
            else:
                out.append(b"%b%d%b" % (parts[0], seq, parts[1]))
        if stop >= len(self):
            out.append(fmt.json_to_glog(self.meta, self.rank, stamp).encode("utf-8", "backslashreplace"))
        return out

    def _each(self, start: int, stop: int) -> Iterator[tuple[str, int, int, int | None, int | None, float | None]]:
        """(event, shape, time, seq, record id, duration) of each record of entries start..stop."""
        durations = self.duration[start:stop].tolist() if self.duration is not None else itertools.repeat(math.nan)
        columns = (self.started, self.completed, self.seq, self.record_id)
        created, shapes = self.created(start, stop).tolist(), self.shape[start:stop].tolist()
        values = (_values(c[start:stop]) for c in columns)
        for at, after_start, after_end, seq, rid, took, shape in zip(created, *values, durations, shapes):
            yield fmt.FR_ENQUEUED, shape, at, seq, rid, None
            if after_start is not None:
                yield fmt.FR_STARTED, shape, at + after_start, seq, 0, None
            if after_end is not None:
                yield fmt.FR_COMPLETED, shape, at + after_end, seq, 0, None if math.isnan(took) else took

    def _record(self, event: str, shape: int, ts: int, seq: int | None, rid: int | None, took: float | None) -> dict[str, Any]:  # fmt: skip
        s = self.shapes[shape]
        if event == fmt.FR_ENQUEUED:
            return {fmt.TS: ts, **s.head, "seq": seq, **s.middle, "record_id": rid, **s.tail}
        if event == fmt.FR_STARTED:
            return {fmt.TS: ts, **s.started, "seq": seq}
        return {fmt.TS: ts, **s.completed, "seq": seq, **({} if took is None else {"duration_ms": took})}

    def _template(self, shape: int, event: str, stamp: str) -> list[bytes] | None:
        """A shape's record text cut where its ids go; None where the cut is not clean."""
        key = (shape, event)
        if key not in self._templates:
            text = fmt.json_to_glog(self._record(event, shape, 0, _SEQ, _ID, None), self.rank, stamp)
            head, *rest = text.encode("utf-8", "backslashreplace").split(b"%d" % _SEQ)
            parts = [head, *rest[0].split(b"%d" % _ID)] if len(rest) == 1 else []
            wanted = 3 if event == fmt.FR_ENQUEUED else 2
            self._templates[key] = parts if len(parts) == wanted else None
        return self._templates[key]


@dataclass(slots=True)
class Shape:
    """What entries share: a record's fields but its time and ids, in the record's order (head, seq, middle,
    record_id, tail), and the start's and completion's fields (then seq)."""

    head: dict[str, Any]
    middle: dict[str, Any]
    tail: dict[str, Any]
    started: dict[str, Any]
    completed: dict[str, Any]
    pg: str
    op: str
    site: str  # file:line
    p2p: bool


def _rows(entries: list[dict[str, Any]], rank: int, world: int | None, shapes: list[Shape]) -> tuple[list, ...]:
    """The columns' values, entry by entry, and the shapes they refer to; the number of entries skipped
    (nested past Python's recursion limit: untrusted input) last."""
    created_, started_, completed_, seqs, ids, durations, shape_ = rows = ([], [], [], [], [], [], [])
    known: dict[tuple, int] = {}
    skipped = 0
    for entry in entries:
        get = entry.get
        created = _int(get("time_created_ns"))
        if created is None or created <= 0:
            continue
        p2p = get("is_p2p") is True
        try:
            key = _shape_key(entry, p2p)
            try:
                shape = known.get(key)
            except TypeError:  # (a frame's value that cannot be a key: a list where a file name goes)
                key = repr(key)
                shape = known.get(key)
            if shape is None:
                shape = known[key] = len(shapes)
                shapes.append(_shape(entry, rank, world, p2p))
        except RecursionError:
            skipped += 1
            continue
        created //= 1000
        created_.append(created)
        for times, key in ((started_, "time_discovered_started_ns"), (completed_, "time_discovered_completed_ns")):
            at = _int(get(key))  # None in pickle, 0 in JSON: not known
            times.append(at // 1000 - created if at else None)
        seqs.append(_int(get("p2p_seq_id" if p2p else "collective_seq_id")))
        ids.append(_int(get("record_id")))
        took = get("duration_ms")
        durations.append(
            took if type(took) is float else float(took) if type(took) is int and _int(took) is not None else None
        )
        shape_.append(shape)
    return (*rows, skipped)


def _shape_key(entry: dict[str, Any], p2p: bool) -> tuple:
    """What a shape reads of an entry, as it reads it, so that entries of one key have one shape (`1`, `1.0`
    and `True` are one key but read otherwise: numbers are normalised or keyed by their text). A frame's
    values are keyed as they are: torch writes its line as an int and the rest as str."""
    get = entry.get
    sizes, dtypes = get("input_sizes"), get("input_dtypes")
    out_sizes, out_dtypes = get("output_sizes"), get("output_dtypes")
    thread = get("thread_id")
    frames = get("frames")
    return (
        _group(entry),
        p2p,
        str(get("profiling_name", "")),
        repr(sizes),
        repr(dtypes),
        None if out_sizes == sizes else repr(out_sizes),  # (an output equal to the input is not shown)
        None if out_dtypes == dtypes else repr(out_dtypes),
        str(get("state", "")),
        thread if type(thread) is str else _int(thread) or 0,
        _int(get("timeout_ms")),
        tuple((f.get("filename"), f.get("line"), f.get("name")) for f in frames if type(f) is dict)
        if type(frames) is list
        else (),
    )


def _group(entry: dict[str, Any]) -> tuple[str, str]:
    """(process group, its description)."""
    group = entry.get("process_group")
    pg, desc = (str(group[0]), str(group[1])) if isinstance(group, (list, tuple)) and len(group) == 2 else ("", "")
    if not pg and "pg_id" in entry:
        pg = str(entry["pg_id"])
    return pg, desc


def _frames(entry: dict[str, Any]) -> list[dict[str, Any]]:
    frames = entry.get("frames")
    return [f for f in frames if type(f) is dict] if type(frames) is list else []


def _column(values: list[int | None]) -> np.ndarray:
    """Integers in int32 where they fit, else int64; None as the type's least value (`_absent`)."""
    given = [v for v in values if v is not None]
    kind = np.int32 if not given or (_I32.min < min(given) and max(given) <= _I32.max) else np.int64
    absent = np.iinfo(kind).min
    return np.array([absent if v is None else v for v in values], kind)


def _absent(column: np.ndarray) -> int:
    return int(np.iinfo(column.dtype).min)


def _values(column: np.ndarray) -> list[int | None]:
    absent = _absent(column)
    return [None if v == absent else v for v in column.tolist()]


def _shape(entry: dict[str, Any], rank: int, world: int | None, p2p: bool) -> Shape:
    pg, desc = _group(entry)
    name = str(entry.get("profiling_name", ""))
    backend, _, op = name.rpartition(":")
    op = op or name
    user = [f for f in _frames(entry) if not _is_own(str(f.get("filename", "")))]
    file, line = _frame_site(user[0]) if user else _NO_FRAME
    common = {fmt.SEVERITY: "I", fmt.RANK: rank, fmt.WORLD_SIZE: world, fmt.TID: _int(entry.get("thread_id")) or 0}
    common |= {fmt.FILE: file, fmt.LINE: line}
    ids = {"op": op, "pg": pg}
    tail: dict[str, Any] = {"timeout_ms": _int(entry.get("timeout_ms"))}
    for key in ("sizes", "dtypes"):  # an output differs from the input in a gather or a scatter only
        if entry.get(f"output_{key}") != entry.get(f"input_{key}"):
            tail[f"out_{key}"] = entry.get(f"output_{key}")
    if p2p:
        tail["p2p"] = True
    if user:
        tail["stack"] = [_frame_text(f) for f in user[:_FRAMES_KEPT]]
    return Shape(
        head={**common, fmt.EVENT: fmt.FR_ENQUEUED, **ids},
        middle={
            "sizes": entry.get("input_sizes"),
            "dtypes": entry.get("input_dtypes"),
            "state": str(entry.get("state", "")),
            "backend": backend,
            "pg_desc": desc,
        },
        tail=tail,
        started={**common, fmt.EVENT: fmt.FR_STARTED, **ids},
        completed={**common, fmt.EVENT: fmt.FR_COMPLETED, **ids},
        pg=pg,
        op=op,
        site=f"{file}:{line}",
        p2p=p2p,
    )


_INT64 = 1 << 63
_I32 = np.iinfo(np.int32)


def _int(value: Any) -> int | None:
    """An integer field's value (what fits a column: a larger one is as good as none)."""
    if type(value) is int:  # (most values: no more checks)
        return value if -_INT64 < value < _INT64 else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, str) and len(value) < 21 and value.lstrip("-").isdecimal()):
        return _int(int(value))
    return None


_own_files: dict[str, bool] = {}  # file name -> torch's or ours: a dump names the same few files thousands of times
_OWN_FILES_KEPT = 4096


def _is_own(filename: str) -> bool:
    own = _own_files.get(filename)
    if own is None:
        if len(_own_files) >= _OWN_FILES_KEPT:
            _own_files.clear()
        own = _own_files[filename] = _OWN.search(filename) is not None
    return own


def _frame_site(frame: dict[str, Any]) -> tuple[str, int]:
    line = _int(frame.get("line"))
    return str(frame.get("filename", "")).rpartition("/")[2] or _NO_FRAME[0], line or 0


def _frame_text(frame: dict[str, Any]) -> str:
    return f"{frame.get('filename')}:{frame.get('line')} in {frame.get('name')}"
