"""One record as Python values: decoded from a glog text record or a JSON-lines object.

Tools loop over these only for the records they need (trace, diff, JSON-lines output); the merge of
glog text never decodes a record.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._json import number
from . import _header

_PREFIX = re.compile(r"([IWEF])\d{4} [\d:.]{15} +(\S+) (.*?):(\d+)\] (?:\[rank \d+\] )?")
# The structured fields: logfmt pairs ending the first line of the message (values with spaces,
# quotes or '=' are JSON strings).
_PAIRS = re.compile(r'(?:^| )((?:[^\s="]+=(?:"(?:[^"\\]|\\.)*"|[^\s"=]*)(?: |$))+)$')
_PAIR = re.compile(r'([^\s="]+)=("(?:[^"\\]|\\.)*"|[^\s"=]*)')
META_EVENT = _header.META_EVENT.decode()
_META_PREFIX = META_EVENT + " {"
CORE = ("ts", "severity", "v", "rank", "world_size", "tid", "file", "line", "event")


def _value(text: str) -> Any:
    if text.startswith('"'):
        return json.loads(text)
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        if repr(value) == text:  # only what the renderer would have written: keeps "007" and "1e5" text
            return value
    return text


def split_fields(first_line: str) -> tuple[str, dict[str, Any]]:
    """(message without its fields, the fields) for the first line of a glog message."""
    match = _PAIRS.search(first_line)
    if not match:
        return first_line, {}
    try:
        fields = {k: _value(v) for k, v in _PAIR.findall(match.group(1))}
    except ValueError:  # a malformed quoted value: keep the line as the message
        return first_line, {}
    return first_line[: match.start()], fields


@dataclass(slots=True)
class Record:
    """A log record. `ts` is epoch µs on rank 0's clock (unless clock correction is off)."""

    ts: int
    severity: str
    rank: int
    tid: int | str
    file: str
    line: int
    event: str  # the message without its structured fields; may span lines
    fields: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None  # the file it came from

    @property
    def v(self) -> int | None:
        """The VLOG level, None for LOG(INFO/WARNING/...) records."""
        v = self.fields.get("v")
        return v if isinstance(v, int) else None

    def as_json(self, world_size: int | None = None) -> dict[str, Any]:
        out = {"ts": self.ts, "severity": self.severity}
        if self.v is not None:
            out["v"] = self.v
        out.update(
            rank=self.rank, world_size=world_size, tid=self.tid, file=self.file, line=self.line, event=self.event
        )
        out.update((k, v) for k, v in self.fields.items() if k not in CORE)
        return out


def from_glog(raw: bytes, ts: int, rank: int, path: Path | None = None) -> Record:
    """Decode one normalised glog record (`Lmmdd hh:mm:ss.uuuuuu tid file:line] [rank R] msg...`)."""
    text = raw.decode("utf-8", "replace").rstrip("\n")
    first, nl, rest = text.partition("\n")
    match = _PREFIX.match(first)
    if not match:  # cannot happen for a record the scanner accepted; keep it whole all the same
        return Record(ts, first[:1], rank, 0, "", 0, text, {}, path)
    sev, tid, file, line = match.groups()
    message, fields = split_fields(first[match.end() :])
    if message.startswith(_META_PREFIX):  # our header record: its dict, as in our JSON-lines files
        with contextlib.suppress(ValueError):
            message, fields = META_EVENT, {"meta": json.loads(message[len(_META_PREFIX) - 1 :])}
    return Record(ts, sev, rank, int(tid) if tid.isdigit() else tid, file, int(line), message + nl + rest, fields, path)


def from_json(obj: dict[str, Any], ts: int, rank: int, path: Path | None = None) -> Record:
    fields = {k: number(v) for k, v in obj.items() if k not in CORE}
    if obj.get("v") is not None:
        fields["v"] = obj["v"]
    event = obj.get("event")
    return Record(
        ts,
        str(obj.get("severity") or "I")[:1],
        rank,
        obj.get("tid", 0),
        str(obj.get("file", "")),
        int(obj.get("line") or 0),
        event if isinstance(event, str) else json.dumps(event),
        fields,
        path,
    )
