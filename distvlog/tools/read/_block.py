"""A block: the whole records of one stretch of one input file, as columns over a buffer of glog text.

Every block's text is in our glog form (`Lmmdd hh:mm:ss.uuuuuu tid file:line] [rank R] msg`, foreign and
JSON-lines records rewritten into it), so the merge writes any block the same way.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from . import _record
from ._arena import Slot


@dataclass
class Counts:
    """What became of a file's lines: records (per rank), header lines, lines skipped by reason, and how many
    records were torn."""

    records: Counter = field(default_factory=Counter)
    lines: int = 0  # lines inside those records
    header: int = 0
    skipped: Counter = field(default_factory=Counter)
    torn: int = 0  # records cut by a crash (their lines are among the skipped)
    cut: int = 0  # lines longer than the reader's cap, kept up to it
    damage: list[str] = field(default_factory=list)  # where and why reading a file stopped early

    def add(self, other: Counts) -> None:
        self.records.update(other.records)
        self.lines += other.lines
        self.header += other.header
        self.skipped.update(other.skipped)
        self.torn += other.torn
        self.cut += other.cut
        self.damage += other.damage


class Origin(Protocol):
    """What a block knows of the file it came from (a `Source`, which is built on blocks)."""

    path: Path
    meta: dict[str, Any] | None


@dataclass(eq=False)
class Block:
    source: Origin
    slot: Slot
    start: np.ndarray  # record starts in slot.buffer, ascending (file order)
    end: np.ndarray  # record ends (after the last '\n')
    ts: np.ndarray  # epoch µs on rank 0's clock
    rank: np.ndarray  # int64 per record
    severity: np.ndarray  # ASCII letter per record (uint8)
    objs: Sequence[dict[str, Any]] | None = None  # JSON-lines input and other programs' evidence: the objects
    _cuts: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.start)

    def text(self, i: int) -> bytes:
        """Record i as glog text (with the timestamp the merge writes)."""
        return self.slot.buffer[self.start[i] : self.end[i]].tobytes()

    def record(self, i: int) -> _record.Record:
        ts, rank, path = int(self.ts[i]), int(self.rank[i]), self.source.path
        if self.objs is not None:
            return _record.from_json(self.objs[i], ts, rank, path)
        return _record.from_glog(self.text(i), ts, rank, path)

    def matching(self, pattern: re.Pattern[bytes]) -> np.ndarray:
        """Which records' text the regex matches (bool mask): one scan over the block, not one per record."""
        if not len(self.start):
            return np.zeros(0, bool)
        base = int(self.start[0])
        text = memoryview(self.slot.buffer[base : int(self.end[-1])])
        return matching(text, (self.start - base).tolist(), (self.end - base).tolist(), pattern)

    def cuts(self) -> np.ndarray:
        """Record boundaries interleaved (start0, end0, start1, ...): records as elements for a take."""
        if self._cuts is None:
            self._cuts = np.empty(2 * len(self.start), np.int64)
            self._cuts[0::2] = self.start
            self._cuts[1::2] = self.end
        return self._cuts

    def release(self) -> None:
        self.slot.release()


def matching(text: bytes | memoryview, starts: list[int], ends: list[int], pattern: re.Pattern[bytes]) -> np.ndarray:
    """Which of the records text[starts[i]:ends[i]] (in order, back to back, each ending in a newline, as a
    multi-line pattern then sees each record as it would alone) the regex matches: one scan."""
    out = np.zeros(len(starts), bool)
    pos = 0
    while pos < len(text) and (match := pattern.search(text, pos)) is not None:
        r = bisect.bisect_right(starts, match.start()) - 1
        if match.end() <= ends[r] or pattern.search(text, starts[r], ends[r]):  # inside record r
            out[r] = True
        pos = ends[r]
    return out
