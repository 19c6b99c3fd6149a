"""Turning a chunk of glog text into a block: whole records, their timestamps and ranks, every line counted.

A chunk ends mid-record; the last record is left for the next chunk (`carry`) unless the file ended. Lines
before the first record are the header (or skipped). Whole and torn records are told apart as the format
specifies (distvlog.format, section 5): padding (NUL runs) is taken out first, leaving a mark where it cut a
line or stood between lines; a chunk without damage and whose records have the lines they declare takes
the vectorised path, any other the exact one, line by line (crashed files only: it is rare and short).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import format as fmt
from . import _foreign
from ._block import Counts
from ._header import Clock
from ._scan import (
    OUT_OF_RANGE,
    PAD,
    UNPLACED,
    Calendar,
    Variant,
    line_starts,
    out_of_range,
    parse_prefix,
    spans,
    windows,
)

NEWLINE, NUL = 10, 0
# A padding run becomes "\0\n": after a line's text, that line is cut; at a line's start, a mark line (a
# boundary: no record continues across it). The marks are idempotent, so a chunk carried over is re-marked.
MARK = b"\0\n"
_COUNT = np.frombuffer(fmt.COUNT_TEXT.encode(), np.uint8)
_COUNT_DIGITS = 10
_COUNT_WINDOW = len(_COUNT) + _COUNT_DIGITS
CUT_BEFORE = "cut short before the first record"
TOO_LONG = "in records longer than 64 MiB or 262,144 lines"
RECORD_CAP = 64 << 20  # a record's bytes (its lines are each at most the reader's line cap)
RECORD_LINES = 1 << 18  # lines parsed at once (the arrays cost ~80 bytes a line), so a record's lines too
HEAD_LINES = 16  # lines before the first record looked at one by one (a header has 3 to 5)


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


def mark_padding(data: np.ndarray, n: int, eof: bool) -> tuple[np.ndarray, int, bool]:
    """data[:n] with its NUL runs replaced by marks, and at the end of the file a last line without "\\n"
    marked cut: (buffer, length, whether anything was marked). A new buffer (with PAD spare bytes) only
    when there is something to mark."""
    view = data[:n]
    cut_at_end = eof and n > 0 and view[n - 1] != NEWLINE
    if not cut_at_end and (n == 0 or view.min() != NUL):
        return data, n, False
    zero = np.flatnonzero(view == NUL)
    pieces: list[bytes] = []
    pos = 0
    if len(zero):
        breaks = np.flatnonzero(np.diff(zero) > 1)
        run_starts = zero[np.concatenate(([0], breaks + 1))].tolist()
        run_ends = (zero[np.concatenate((breaks, [len(zero) - 1]))] + 1).tolist()
        for start, end in zip(run_starts, run_ends):
            pieces.append(view[pos:start].tobytes())
            if end == n and not eof:  # the run may go on in the next chunk: decided there
                pieces.append(MARK[:1])
            else:  # (a newline right after the run ends the mark)
                pieces.append(MARK[:1] if end < n and view[end] == NEWLINE else MARK)
            pos = end
    pieces.append(view[pos:n].tobytes())
    text = b"".join(pieces)
    if eof and text and not text.endswith(b"\n"):
        text += MARK
    out = np.empty(len(text) + PAD, np.uint8)
    out[: len(text)] = np.frombuffer(text, np.uint8)
    return out, len(text), True


def _count_before_first(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, reason: str, counts: Counts) -> None:
    """The lines before a chunk's first record: header lines (only among the first few), marks (padding),
    lines cut short, the others skipped for `reason`; counted in bulk past the first HEAD_LINES."""
    for i in range(min(len(starts), HEAD_LINES)):
        line = data[starts[i] : ends[i]].tobytes()
        if line.endswith(MARK):  # padding or a cut: a mark, or a line cut short
            if line != MARK:
                counts.skipped[CUT_BEFORE] += 1
        elif fmt.is_header_line(line):
            counts.header += 1
        else:
            counts.skipped[reason] += 1
    if len(starts) > HEAD_LINES:
        s, e = starts[HEAD_LINES:], ends[HEAD_LINES:]
        marked = (e - s >= 2) & (data[np.maximum(e - 2, 0)] == NUL)
        cut = int(np.count_nonzero(marked & (e - s > 2)))
        if cut:
            counts.skipped[CUT_BEFORE] += cut
        if len(s) - int(np.count_nonzero(marked)):
            counts.skipped[reason] += len(s) - int(np.count_nonzero(marked))


def declared_counts(data: np.ndarray, line_ends: np.ndarray) -> np.ndarray:
    """The continuation lines each line declares at its end (` +lines=N`), 0 where it declares none.
    `line_ends`: where each line's "\\n" is; the lines are record starts (longer than the window)."""
    if not len(line_ends):
        return np.zeros(0, np.int64)
    rows = spans(data, _COUNT_WINDOW)[np.maximum(line_ends - _COUNT_WINDOW, 0)].view(np.uint8)
    rows = rows.reshape(len(line_ends), _COUNT_WINDOW)
    digit = rows - np.uint8(48)
    is_digit = digit <= 9
    k = np.argmin(is_digit[:, ::-1], axis=1)  # trailing digits (0 when all are: no room for the name)
    at = _COUNT_WINDOW - k - len(_COUNT)
    r = np.arange(len(rows))[:, None]
    named = (rows[r, at[:, None] + np.arange(len(_COUNT))] == _COUNT).all(axis=1) & (k > 0)
    value = np.zeros(len(rows), np.int64)
    for j in range(_COUNT_DIGITS):
        col = np.minimum(_COUNT_WINDOW - k + j, _COUNT_WINDOW - 1)
        value = np.where(j < k, value * 10 + digit[np.arange(len(rows)), col], value)
    return np.where(named, value, 0)


class GlogParser:
    def __init__(
        self,
        variant: Variant,
        calendar: Calendar,
        utc_offset_s: int,
        clock: Clock,
        ranks: RankRule | None,
        own_rank: int,
        strict: bool,
    ) -> None:
        self.variant, self.calendar, self.clock = variant, calendar, clock
        self.utc_offset_us = utc_offset_s * 1_000_000
        self.ranks = ranks  # None: our own file, every record already in our form with its tag
        self.own_rank = own_rank
        # Our own file of format version 2 (section 5): a record has exactly the lines it declares, and its
        # first line the rank tag; a line without them is damage (bytes written over records), not a record.
        self.strict = strict
        self.display_offset_us: int | None = None  # rewrite timestamps into this zone (merge output)
        self.in_long_record = False  # the lines before the next record start belong to a skipped one

    def parse(self, data: np.ndarray, n: int, eof: bool) -> Parsed:
        counts = Counts()
        data, n, marked = mark_padding(data, n, eof)
        starts, complete = line_starts(data, n)
        ok, stamps = parse_prefix(windows(data, starts), self.variant)
        newlines = insert_at = None
        if self.ranks is not None:
            newlines = np.flatnonzero(data[:n] == NEWLINE)
            line_end = newlines[np.searchsorted(newlines, starts)]
            good, insert_at = _foreign.bracket_after_prefix(data, n, starts, self.variant, line_end)
            ok &= good
        ends = np.append(starts[1:], complete)  # after each line's "\n"
        damaged = self._untagged(data, n, starts, ends, ok) if self.strict else None
        rec = np.flatnonzero(ok)
        first = int(rec[0]) if len(rec) else len(starts)
        lead = TOO_LONG if self.in_long_record else fmt.STRAY + " (before the first one)"
        _count_before_first(data, starts[:first], ends[:first], lead, counts)
        self.in_long_record = self.in_long_record and not len(rec)
        carry_from = complete if eof else (int(starts[rec[-1]]) if len(rec) else complete)
        if not eof and len(rec):
            rec = rec[:-1]  # the last record may go on in the next chunk
            if complete - carry_from > RECORD_CAP or carry_from == 0 and len(starts) >= RECORD_LINES:
                # it goes on and on: skipped, and its lines to come
                counts.skipped[TOO_LONG] += len(starts) - int(np.searchsorted(starts, carry_from))
                carry_from, self.in_long_record = complete, True
        upto = int(np.searchsorted(starts, carry_from))  # lines of this chunk's records
        clean = not marked and (damaged is None or not damaged[:upto].any())
        kept = self._regular(data, rec, ends, upto, eof) if clean else None
        if kept is None:
            kept = _exact(data, starts, ends, ok, damaged, rec, upto, counts, self.strict)
        rec, last_line = kept
        local, why = self.calendar.local_us(stamps.select(rec))
        ts = self.clock.correct(local - self.utc_offset_us)
        why[(why == 0) & out_of_range(ts)] = OUT_OF_RANGE
        if why.any():  # times the calendar cannot place: skipped, by reason
            for code in np.unique(why[why > 0]).tolist():
                counts.skipped[UNPLACED[code]] += int((last_line - rec)[why == code].sum())
            placed = why == 0
            rec, last_line, ts = rec[placed], last_line[placed], ts[placed]
        rs, re_ = starts[rec], ends[last_line - 1] if len(rec) else starts[rec]
        counts.lines += int((last_line - rec).sum())
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

    def _untagged(self, data: np.ndarray, n: int, starts: np.ndarray, ends: np.ndarray, ok: np.ndarray) -> np.ndarray:
        """Which lines start a record by their prefix but have no rank tag after it (per line)."""
        at = np.flatnonzero(ok)
        out = np.zeros(len(starts), bool)
        if len(at):
            good, insert_at = _foreign.bracket_after_prefix(data, n, starts[at], self.variant, ends[at] - 1)
            out[at] = ~good | ~_foreign.tagged(data, np.minimum(insert_at, n))  # (past n: not good anyway)
        return out

    def _regular(
        self, data: np.ndarray, rec: np.ndarray, ends: np.ndarray, upto: int, eof: bool
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(records, the line after each one's last) when every record has what it declares (no padding,
        no cut line; a count only where lines follow, and then exactly those; in a strict file, no line
        beyond the count either), else None."""
        last_line = np.append(rec[1:], upto)[: len(rec)]
        check = (last_line - rec) > 1
        if eof and len(rec):
            check[-1] = True  # the end of the file may cut a record at a line's end
        at = np.flatnonzero(check)
        declared = declared_counts(data, ends[rec[at]] - 1)
        if (((declared > 0) | self.strict) & (declared != last_line[at] - rec[at] - 1)).any():
            return None
        return rec, last_line

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


def _exact(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    ok: np.ndarray,
    damaged: np.ndarray | None,
    rec: np.ndarray,
    upto: int,
    counts: Counts,
    strict: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Section 5 of the format, line by line, over the lines from the first record to `upto`: the whole
    records (first line, the line after the last), the torn and damaged ones and stray lines counted.
    `damaged`: the record starts without a rank tag (a strict file's), None elsewhere."""
    kept_first: list[int] = []
    kept_end: list[int] = []
    i = int(rec[0]) if len(rec) else upto
    starts_l, ends_l, ok_l = starts.tolist(), ends.tolist(), ok.tolist()
    damaged_l = damaged.tolist() if damaged is not None else [False] * len(ok_l)

    def kind(j: int) -> str:  # "mark", "cut" or "whole"
        line = data[starts_l[j] : ends_l[j]]
        if len(line) < 2 or line[-2] != NUL:
            return "whole"
        return "mark" if len(line) == 2 else "cut"

    while i < upto:
        what = kind(i)
        if what == "mark":
            i += 1
            continue
        if not ok_l[i]:
            if what == "cut":  # a record whose start was cut
                counts.torn += 1
                counts.skipped[fmt.TORN] += 1
            else:
                counts.skipped[fmt.STRAY] += 1
            i += 1
            continue
        if damaged_l[i] and what == "whole":
            # Its rank tag written over (a line cut before its tag is torn, below); the lines after it are stray.
            counts.skipped[fmt.DAMAGED] += 1
            i += 1
            continue
        declared = 0 if what == "cut" else fmt.declared_count(data[starts_l[i] : ends_l[i] - 1].tobytes())
        # Lines it may have: a record without a count, not in a strict file, keeps every line to the next one.
        most = declared if declared or strict else upto
        j, torn = i + 1, what == "cut"
        while not torn and j < upto and not ok_l[j] and j - i - 1 < most:
            kind_j = kind(j)
            if kind_j == "mark" or (kind_j == "cut" and not declared):
                break  # (a cut line after a record without a count is a torn record of its own)
            torn = kind_j == "cut"
            j += 1
        if declared and j - i - 1 < declared:
            torn = True
        if torn:
            counts.torn += 1
            counts.skipped[fmt.TORN] += j - i
        else:
            kept_first.append(i)
            kept_end.append(j)
        i = j
    return np.array(kept_first, np.int64), np.array(kept_end, np.int64)
