"""Turning a chunk of glog text into a block: whole records, their timestamps and ranks, every line counted.

A chunk ends mid-record; the last record is left for the next chunk (`carry`) unless the file ended.
Lines with NUL bytes are binary garbage and dropped; lines before the first record are the header (or
skipped). A file ending without a newline (a killed rank's, one still being written) ends in a line cut
short: that line is skipped and counted, and every record before it is kept. So a record whose first
line is whole keeps its whole lines (what a killed rank was doing is what the user is looking for), while
a record whose first line is cut short is not kept: its message and fields may be cut (`norm=1` of
`norm=1000`), and its text is still there in the file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _foreign
from ._block import Counts
from ._header import Clock, is_header_line
from ._scan import Calendar, Variant, line_starts, parse_prefix, windows


@dataclass
class Parsed:
    """Records found in data (offsets into `data`, which may be a rewritten copy of the chunk)."""

    data: np.ndarray | memoryview
    start: np.ndarray
    end: np.ndarray
    ts: np.ndarray
    rank: np.ndarray
    severity: np.ndarray
    carry: np.ndarray  # the chunk's last bytes, which belong to the next chunk (a copy)
    counts: Counts


class UnknownRank(Exception):
    """A foreign record with no rank: no tag, no --rank-of, no rank in the file's name."""


@dataclass
class RankRule:
    """How a foreign file's records get their rank (see _foreign)."""

    explicit: int | None
    default: int | None


class GlogParser:
    def __init__(
        self,
        variant: Variant,
        calendar: Calendar,
        utc_offset_s: int,
        clock: Clock,
        ranks: RankRule | None,
        own_rank: int,
    ) -> None:
        self.variant, self.calendar, self.clock = variant, calendar, clock
        self.utc_offset_us = utc_offset_s * 1_000_000
        self.ranks = ranks  # None: our own file, every record already in our form with its tag
        self.own_rank = own_rank
        self.display_offset_us: int | None = None  # rewrite timestamps into this zone (merge output)

    def parse(self, data: np.ndarray, n: int, eof: bool) -> Parsed:
        counts = Counts()
        starts, complete = line_starts(data, n)
        if complete and data[:complete].min() == 0:
            n = _drop_garbage(data, n, starts, counts)
            starts, complete = line_starts(data, n)
        ok, stamps = parse_prefix(windows(data, starts), self.variant)
        newlines = insert_at = None
        if self.ranks is not None:
            newlines = np.flatnonzero(data[:n] == 10)
            good, insert_at = _foreign.bracket_after_prefix(data, n, starts, self.variant, newlines)
            ok &= good
        rec = np.flatnonzero(ok)
        first = int(rec[0]) if len(rec) else len(starts)
        for i in range(first):  # before the first record: the header, else lines we cannot place
            line = data[starts[i] : starts[i + 1] if i + 1 < len(starts) else complete].tobytes()
            if is_header_line(line):
                counts.header += 1
            else:
                counts.skipped["not part of a record (before the first one)"] += 1
        line_of_end = np.append(rec[1:], len(starts))[: len(rec)]  # none when no line starts a record
        bounds = np.append(starts, complete)
        carry_from = n if eof else (int(starts[rec[-1]]) if len(rec) else complete)
        if not eof and len(rec):
            rec, line_of_end = rec[:-1], line_of_end[:-1]
        elif eof and complete < n:  # no newline at the end: the last line was cut short (see above)
            counts.skipped["binary garbage" if data[complete:n].min() == 0 else "truncated last line"] += 1
        rs, re_ = starts[rec], bounds[line_of_end]
        counts.lines += int((line_of_end - rec).sum())
        local = self.calendar.local_us(stamps.select(rec))
        ts = self.clock.correct(local - self.utc_offset_us)
        severity = stamps.severity[rec]
        if self.ranks is None:
            rank = np.full(len(rec), self.own_rank, np.int64)
            out = data
        else:
            lay = _foreign.layout(data, rs, insert_at[rec], newlines[np.searchsorted(newlines, rs)])
            rank = self._foreign_ranks(data, n, rs, lay)
            out, rs = _foreign.normalise(data, rs, re_, self.variant, lay, rank)
            out = np.frombuffer(out, np.uint8)
            re_ = np.append(rs[1:], len(out)) if len(rs) else rs
        uniq, per = np.unique(rank, return_counts=True)
        counts.records.update(dict(zip(uniq.tolist(), per.tolist())))
        return Parsed(out, rs, re_, ts, rank, severity, data[carry_from:n].copy(), counts)

    def needs_restamp(self) -> bool:
        return self.display_offset_us is not None and (
            self.ranks is not None or bool(self.clock) or self.display_offset_us != self.utc_offset_us
        )

    def _foreign_ranks(self, data: np.ndarray, n: int, starts: np.ndarray, lay: _foreign.Layout) -> np.ndarray:
        rule = self.ranks
        if rule.explicit is not None:
            fallback = np.full(len(starts), rule.explicit, np.int64)
        else:
            fallback = _foreign.nccl_ranks(data, n, starts, lay.line_end)
            fallback[fallback < 0] = -1 if rule.default is None else rule.default
        rank = np.where(lay.tag_rank >= 0, lay.tag_rank, fallback)
        if (rank < 0).any():
            raise UnknownRank()
        return rank


def _drop_garbage(data: np.ndarray, n: int, starts: np.ndarray, counts: Counts) -> int:
    """Remove the complete lines holding NUL bytes (in place); returns the new length."""
    _, complete = line_starts(data, n)
    zeros = np.flatnonzero(data[:complete] == 0)
    bad = np.unique(np.searchsorted(starts, zeros, "right") - 1)
    ends = np.append(starts[1:], complete)
    keep = np.ones(n, bool)
    for i in bad.tolist():
        keep[starts[i] : ends[i]] = False
    counts.skipped["binary garbage"] += len(bad)
    kept = data[:n][keep]
    data[: len(kept)] = kept
    return len(kept)
