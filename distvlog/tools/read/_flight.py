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

import json
import re
from pathlib import Path
from typing import Any

import orjson

from ... import format as fmt
from . import _unpickle

TESTED_VERSIONS = ("2.10",)  # what torch 2.13 writes; older versions have fewer fields, read by presence
_KEYS = (b"pg_config", b"pg_status", b"entries", b"comm_lib_version", b"nccl_comm_state")
_NO_FRAME = ("flight_recorder", 0)
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
        except ValueError:
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
            ranks = [int(r) for r in re.findall(r"\d+", str(value.get("ranks", "")))]
            out[str(value.get("name", key))] = {"desc": str(value.get("desc", "")), "ranks": ranks}
    return out


def records(dump: dict[str, Any], cut: bool, rank: int, dumped_us: int) -> list[dict[str, Any]]:
    """The dump's entries and the dump itself as our JSON-lines records (format, section 3.1)."""
    entries = dump.get("entries")
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    found = groups(dump)
    world = max((len(g["ranks"]) for g in found.values() if g["ranks"]), default=None)
    out: list[dict[str, Any]] = []
    for entry in entries:
        out.extend(_entry_records(entry, rank, world))
    last = max((r[fmt.TS] for r in out), default=dumped_us)
    status = dump.get("pg_status")
    out.append(
        {
            fmt.TS: max(dumped_us, last),
            fmt.SEVERITY: "W" if cut else "I",
            fmt.RANK: rank,
            fmt.WORLD_SIZE: world,
            fmt.TID: 0,
            fmt.FILE: _NO_FRAME[0],
            fmt.LINE: 0,
            fmt.EVENT: fmt.FR_DUMP,
            "version": str(dump.get("version", "")),
            "world": world,  # a field too: the reader keeps no record's world_size
            "entries": len(entries),
            "cut": cut,
            "groups": found,
            "status": status if isinstance(status, dict) else {},
        }
    )
    return out


def _int(value: Any) -> int | None:
    if type(value) is int:  # (most values: no more checks)
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None


def _entry_records(entry: dict[str, Any], rank: int, world: int | None) -> list[dict[str, Any]]:
    created = _int(entry.get("time_created_ns"))
    if created is None or created <= 0:
        return []
    group = entry.get("process_group")
    pg, desc = (str(group[0]), str(group[1])) if isinstance(group, (list, tuple)) and len(group) == 2 else ("", "")
    if not pg and "pg_id" in entry:
        pg = str(entry["pg_id"])
    p2p = entry.get("is_p2p") is True
    seq = _int(entry.get("p2p_seq_id" if p2p else "collective_seq_id"))
    name = str(entry.get("profiling_name", ""))
    backend, _, op = name.rpartition(":")
    frames = [f for f in entry.get("frames") or () if isinstance(f, dict)]
    user = [f for f in frames if not _is_own(str(f.get("filename", "")))]
    file, line = _frame_site(user[0]) if user else _NO_FRAME
    tid = _int(entry.get("thread_id")) or 0
    common = {fmt.RANK: rank, fmt.WORLD_SIZE: world, fmt.TID: tid, fmt.FILE: file, fmt.LINE: line}
    ids = {"op": op or name, "pg": pg, "seq": seq}
    enqueued = {
        fmt.TS: created // 1000,
        fmt.SEVERITY: "I",
        **common,
        fmt.EVENT: fmt.FR_ENQUEUED,
        **ids,
        "sizes": entry.get("input_sizes"),
        "dtypes": entry.get("input_dtypes"),
        "state": str(entry.get("state", "")),
        "backend": backend,
        "pg_desc": desc,
        "record_id": _int(entry.get("record_id")),
        "timeout_ms": _int(entry.get("timeout_ms")),
    }
    for key in ("sizes", "dtypes"):  # an output differs from the input in a gather or a scatter only
        if entry.get(f"output_{key}") != entry.get(f"input_{key}"):
            enqueued[f"out_{key}"] = entry.get(f"output_{key}")
    if p2p:
        enqueued["p2p"] = True
    if user:
        enqueued["stack"] = [_frame_text(f) for f in user[:_FRAMES_KEPT]]
    out = [enqueued]
    for event, key in (
        (fmt.FR_STARTED, "time_discovered_started_ns"),
        (fmt.FR_COMPLETED, "time_discovered_completed_ns"),
    ):
        at = _int(entry.get(key))
        if at:  # None in pickle, 0 in JSON: not known
            extra = (
                {"duration_ms": entry["duration_ms"]} if event == fmt.FR_COMPLETED and "duration_ms" in entry else {}
            )
            out.append({fmt.TS: at // 1000, fmt.SEVERITY: "I", **common, fmt.EVENT: event, **ids, **extra})
    return out


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
