"""Vectorised scanning of glog text: line starts, record starts, severities and timestamps of a whole block.

numpy over the block's bytes, never a Python loop per line: a record starts at a line that begins with
the severity and the stamp of our format (distvlog.format: `L` + `mmdd hh:mm:ss.uuuuuu` + space; other
programs' glog is read too: glog 0.7 puts the year after the severity, c10d a `[` before it); every other
line continues the record before it. The buffers carry `PAD` spare bytes so fixed-width windows never run
off.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

import numpy as np

from ... import format as fmt

PAD = 64
WINDOW = 32
_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_DAY_US = 86_400_000_000
# Times a record can have (epoch µs): the calendar's years 1-9999, three days in from each end so that a
# time zone and a clock offset (each at most a day, see _header) never take a placed time out of it.
MAX_SHIFT_US = _DAY_US
MIN_US = (_dt.date(1, 1, 4).toordinal() - _EPOCH_ORDINAL) * _DAY_US
MAX_US = (_dt.date(9999, 12, 28).toordinal() - _EPOCH_ORDINAL) * _DAY_US
# Why a record's time cannot be placed (Calendar.local_us's codes, 1 on).
UNPLACED = ("", "no such date (like Feb 30)", "year outside 1-9999", "time out of range (years 1-9999)")
NO_SUCH_DATE, BAD_YEAR, OUT_OF_RANGE = 1, 2, 3
_SEVERITY_OK = np.zeros(256, bool)
_SEVERITY_OK[list(fmt.SEVERITIES.encode())] = True
# Where the stamp's parts are, from its layout (the digit pairs and the separators between them).
STAMP = fmt.STAMP
MONTH, DAY = STAMP.index("mmdd"), STAMP.index("mmdd") + 2
HOUR, MINUTE, SECOND, MICROS = STAMP.index("hh"), STAMP.index(":mm") + 1, STAMP.index("ss"), STAMP.index("uuuuuu")
SEPARATORS = tuple((i, c) for i, c in enumerate(STAMP) if not c.isalpha()) + ((len(STAMP), " "),)


@dataclass(frozen=True)
class Variant:
    """Where the timestamp sits: `lead` bytes before the severity letter, `year` digits after it."""

    lead: int = 0
    year: bool = False

    @property
    def digits_at(self) -> int:  # offset of mm (after the severity letter and the year)
        return self.lead + 1 + (4 if self.year else 0)

    @property
    def prefix_len(self) -> int:  # up to and including the space after the microseconds
        return self.digits_at + len(STAMP) + 1


VARIANTS = (Variant(), Variant(year=True), Variant(lead=1), Variant(lead=1, year=True))
OURS = VARIANTS[0]


def line_starts(data: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """Starts of the complete lines of data[:n], and where the last complete line ends."""
    nl = np.flatnonzero(data[:n] == 10)
    if not len(nl):
        return nl, 0
    starts = np.empty(len(nl), np.int64)
    starts[0] = 0
    starts[1:] = nl[:-1] + 1
    return starts, int(nl[-1]) + 1


def spans(data: np.ndarray, width: int, offset: int = 0) -> np.ndarray:
    """The `width` bytes from each position of data (+ offset) as one item: copying whole items by index is
    several times faster in numpy than copying narrow rows of a 2-D byte view."""
    return np.ndarray((len(data) - offset - width + 1,), f"V{width}", data, offset, (1,))


def windows(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The WINDOW bytes from each offset in `at`, one row each (data must have PAD spare bytes)."""
    return spans(data, WINDOW)[at].view(np.uint8).reshape(len(at), WINDOW)


def _two(rows: np.ndarray, col: int) -> tuple[np.ndarray, np.ndarray]:
    """The 2-digit number at columns col, col+1 (uint8 arithmetic on columns: fast) and whether both are digits."""
    hi, lo = rows[:, col] - np.uint8(48), rows[:, col + 1] - np.uint8(48)
    return hi * np.uint8(10) + lo, (hi <= 9) & (lo <= 9)


@dataclass
class Stamps:
    """The parsed prefix of the lines that start records."""

    severity: np.ndarray  # ASCII letters, uint8
    year: np.ndarray | None
    month: np.ndarray
    day: np.ndarray
    tod_us: np.ndarray  # microseconds since local midnight

    def select(self, rows: np.ndarray) -> Stamps:
        return Stamps(
            self.severity[rows],
            None if self.year is None else self.year[rows],
            self.month[rows],
            self.day[rows],
            self.tod_us[rows],
        )


def parse_prefix(rows: np.ndarray, variant: Variant) -> tuple[np.ndarray, Stamps]:
    """Which rows start a record (mask), and severity, date and time of day of every row."""
    d = variant.digits_at
    sev = rows[:, variant.lead]
    ok = _SEVERITY_OK[sev]
    if variant.lead:
        ok &= rows[:, 0] == ord("[")
    year = None
    if variant.year:
        century, good = _two(rows, d - 4)
        ok &= good
        yy, good = _two(rows, d - 2)
        ok &= good
        year = century.astype(np.int64) * 100 + yy
    (month, m_ok), (day, d_ok) = _two(rows, d + MONTH), _two(rows, d + DAY)
    (hour, h_ok), (minute, mi_ok), (sec, s_ok) = _two(rows, d + HOUR), _two(rows, d + MINUTE), _two(rows, d + SECOND)
    (us1, u1), (us2, u2), (us3, u3) = _two(rows, d + MICROS), _two(rows, d + MICROS + 2), _two(rows, d + MICROS + 4)
    ok &= m_ok & d_ok & h_ok & mi_ok & s_ok & u1 & u2 & u3
    ok &= (month >= 1) & (month <= 12) & (day >= 1) & (day <= 31) & (hour < 24) & (minute < 60) & (sec < 61)
    for col, char in SEPARATORS:
        ok &= rows[:, d + col] == ord(char)
    seconds = (hour.astype(np.int64) * 60 + minute) * 60 + sec
    tod = seconds * 1_000_000 + (us1.astype(np.int64) * 10_000 + us2.astype(np.int64) * 100 + us3)
    return ok, Stamps(sev, year, month.astype(np.int64), day.astype(np.int64), tod)


def detect_variant(data: np.ndarray, starts: np.ndarray) -> Variant | None:
    """The prefix layout most of these lines use, None when no line starts a glog record."""
    rows = windows(data, starts[:2000])
    counts = [int(parse_prefix(rows, v)[0].sum()) for v in VARIANTS]
    best = max(range(len(VARIANTS)), key=lambda i: counts[i])
    return VARIANTS[best] if counts[best] else None


class Calendar:
    """Dates to epoch days; for `mmdd` stamps also the year, which rolls over when the month goes back.

    The month must drop by more than six (December → January) to count as a new year, so records from
    two threads straddling a month end do not; a month more than six ahead is a straggler of last year.
    """

    def __init__(self, year: int | None, month: int = 0) -> None:
        """`year` from the file's header; None: this year, or last year if the first month is still ahead."""
        today = _dt.date.today()
        self.year = today.year if year is None else year
        self.guess_from = today.month if year is None else 0
        self.month = month

    def local_us(self, st: Stamps) -> tuple[np.ndarray, np.ndarray]:
        """Local wall-clock microseconds since 1970 (no time zone applied yet), and per stamp 0 or why its
        date cannot be placed (an UNPLACED code: those stamps' times are 0)."""
        if not len(st.month):
            return np.zeros(0, np.int64), np.zeros(0, np.int8)
        key = st.month * 100 + st.day
        if st.year is not None:
            key = key + st.year * 10_000
        cut = np.flatnonzero(key[1:] != key[:-1]) + 1
        firsts = np.concatenate(([0], cut))
        days = np.empty(len(firsts), np.int64)
        why = np.zeros(len(firsts), np.int8)
        for i, k in enumerate(key[firsts].tolist()):
            year, month, day = k // 10_000, k // 100 % 100, k % 100
            days[i], why[i] = self._ordinal(year if st.year is not None else self._year_of(month), month, day)
        lengths = np.diff(np.concatenate((firsts, [len(key)])))
        return np.repeat(days, lengths) * _DAY_US + st.tod_us, np.repeat(why, lengths)

    def _year_of(self, month: int) -> int:
        if not self.month:
            self.month = month
            if self.guess_from and month > self.guess_from:
                self.year -= 1
        if month < self.month - 6:
            self.year += 1
        elif month > self.month + 6:
            return self.year - 1
        self.month = month
        return self.year

    @staticmethod
    def _ordinal(year: int, month: int, day: int) -> tuple[int, int]:
        """(days since 1970, 0), or (0, why) for a date the calendar does not have."""
        if not 1 <= year <= 9999:
            return 0, BAD_YEAR
        try:
            return _dt.date(year, month, day).toordinal() - _EPOCH_ORDINAL, 0
        except ValueError:
            return 0, NO_SUCH_DATE


def out_of_range(ts: np.ndarray) -> np.ndarray:
    """Which times (epoch µs) no calendar date can show (see MIN_US)."""
    return (ts < MIN_US) | (ts > MAX_US)
