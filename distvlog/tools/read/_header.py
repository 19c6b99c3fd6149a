"""What a file's head tells the reader besides its format: which processes' records it holds (for `_runs`),
and the clock offset to rank 0 by which its timestamps are corrected (the slots of its meta record)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import format as fmt
from ._scan import MAX_SHIFT_US

_META = fmt.META_EVENT.encode()


def metas_in(text: bytes) -> list[dict[str, Any]]:
    """Which processes' records a file holds, from the head of the file (`text`): a merged timeline's
    `Merged processes:` header line, else the meta record of every process whose records are in it (a rank
    file's first record; a merged timeline cut short has them where the processes started)."""
    lines = text.split(b"\n")[:-1]  # whole lines only
    for line in lines[:8]:
        if not fmt.is_header_line(line):
            break
        listed = fmt.processes_line_metas(line)
        if listed is not None:
            return listed
    out = []
    for line in lines:
        if _META not in line:
            continue
        if line[:1] == b"{":
            record: Any = fmt.parse_json(line)
        else:
            record = fmt.parse_glog(line.decode("utf-8", "replace"))
        meta = fmt.meta_of(record) if record is not None else None
        if meta is not None:
            out.append(meta)
    return out


@dataclass
class Clock:
    """This rank's clock offset to rank 0, linear between the start and end measurements (clamped). An
    offset of more than a day is no clock's: it is taken as not measured."""

    points: list[tuple[float, int]] = field(default_factory=list)

    @classmethod
    def from_meta(cls, meta: dict[str, Any] | None) -> Clock:
        if not meta:
            return cls()
        points = [p for p in map(fmt.clock_of_slot, (meta.get(s) for s in fmt.CLOCK_SLOTS)) if p]
        return cls([(offset, at) for offset, at in points if abs(offset) <= MAX_SHIFT_US])  # (NaN: not <=)

    @staticmethod
    def zone(meta: dict[str, Any]) -> int:
        """The meta record's UTC offset in seconds; 0 when it is not one a clock can have (at most a day)."""
        offset = meta.get("utc_offset_s")
        return offset if type(offset) is int and abs(offset) * 1_000_000 <= MAX_SHIFT_US else 0

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
