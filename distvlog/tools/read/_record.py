"""One record as Python values, decoded by the format module from a glog text record or a JSON-lines object.

Tools decode only the records they need (trace, diff, JSON-lines output); the merge of glog text never
decodes a record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import format as fmt


@dataclass(slots=True)
class Record:
    """A log record. `ts` is epoch µs on rank 0's clock (unless clock correction is off)."""

    ts: int
    severity: str
    rank: int
    tid: int | str
    file: str
    line: int
    event: str  # the message, without its fields; may span lines
    fields: dict[str, Any] = field(default_factory=dict)  # `v` included; a meta record's metadata is `meta`
    path: Path | None = None  # the file it came from

    @property
    def v(self) -> int | None:
        """The VLOG level, None for LOG(INFO/WARNING/...) records."""
        v = self.fields.get(fmt.V)
        return v if type(v) is int else None

    def as_json(self, world_size: int | None = None) -> dict[str, Any]:
        """The record as our JSON-lines object (3.1 of the format), `ts` as read."""
        out: dict[str, Any] = {fmt.TS: self.ts, fmt.SEVERITY: self.severity}
        if self.v is not None:
            out[fmt.V] = self.v
        out.update(
            {
                fmt.RANK: self.rank,
                fmt.WORLD_SIZE: world_size,
                fmt.TID: self.tid,
                fmt.FILE: self.file,
                fmt.LINE: self.line,
                fmt.EVENT: self.event,
            }
        )
        out.update((k, v) for k, v in self.fields.items() if k not in fmt.CORE_FIELDS)
        return out


def from_glog(raw: bytes, ts: int, rank: int, path: Path | None = None) -> Record:
    """Decode one glog record in our form (`Lmmdd hh:mm:ss.uuuuuu tid file:line] [rank R] body...`)."""
    text = raw.decode("utf-8", "replace")
    if text.endswith("\n"):
        text = text[:-1]
    parsed = fmt.parse_glog(text)
    if parsed is None:  # cannot happen for a record the scanner accepted; keep it whole all the same
        return Record(ts, text[:1], rank, 0, "", 0, text, {}, path)
    fields = parsed.fields
    meta = fmt.meta_of(parsed)
    if meta is not None:  # our meta record: its metadata as a field, as in our JSON-lines files
        return Record(
            ts,
            parsed.severity,
            rank,
            parsed.tid,
            parsed.file,
            parsed.line,
            fmt.META_EVENT,
            {fmt.META_FIELD: meta},
            path,
        )
    return Record(ts, parsed.severity, rank, parsed.tid, parsed.file, parsed.line, parsed.message, fields, path)


def from_json(obj: dict[str, Any], ts: int, rank: int, path: Path | None = None) -> Record:
    """Decode one JSON-lines object (already through the format's JSON mapping)."""
    fields = {k: v for k, v in obj.items() if k not in fmt.CORE_FIELDS}
    if obj.get(fmt.V) is not None:
        fields[fmt.V] = obj[fmt.V]
    tid, line = obj.get(fmt.TID, 0), obj.get(fmt.LINE)
    return Record(
        ts,
        str(obj.get(fmt.SEVERITY) or "I")[:1],
        rank,
        tid if type(tid) in (int, str) else str(tid),
        str(obj.get(fmt.FILE, "")),
        line if type(line) is int else 0,
        fmt.message_of(obj.get(fmt.EVENT)),
        fields,
        path,
    )
