"""merge's record filters: --ranks, --min-severity, --min-v/--max-v, --grep, --node, --since/--until.

Cheap tests run on whole columns (rank, severity, time); text tests scan a block's text once with a
regex and decode only the records it hits.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import fnmatch
import re
from collections.abc import Callable

import numpy as np

from ... import format as fmt
from ...errors import InputError
from ..read import Block, Record, parse_int_list

LEVEL = np.zeros(256, np.int8)
for _i, _c in enumerate(fmt.SEVERITIES):
    LEVEL[ord(_c)] = _i
# Records worth decoding for --node (a node field, or Paddle's own label: "multiply1GradNode(0x..) begin run")
# and for --min-v/--max-v (a v field).
_NODE_HINT = fmt.texts_pattern(fmt.field_text(fmt.NODE), "(0x")
_V_HINT = fmt.texts_pattern(fmt.field_text(fmt.V))
_TIME_FORMATS = (
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M",
    "%Y/%m/%d %H:%M:%S.%f",
    "%Y/%m/%d %H:%M:%S",
    "%Y/%m/%d %H:%M",
)
_DAY_FORMATS = ("%m%d %H:%M:%S.%f", "%m%d %H:%M:%S", "%m%d %H:%M")  # glog's own, no year
_TOD_FORMATS = ("%H:%M:%S.%f", "%H:%M:%S", "%H:%M")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ranks", metavar="LIST", help="only these ranks, e.g. 0,2-3")
    parser.add_argument(
        "--min-severity",
        metavar="S",
        type=str.upper,
        choices=list(fmt.SEVERITIES),
        help="only records of at least this severity (I, W, E, F)",
    )
    parser.add_argument("--min-v", metavar="N", type=int, help="only VLOG records of level N or more")
    parser.add_argument("--max-v", metavar="N", type=int, help="drop VLOG records above level N")
    parser.add_argument("--grep", metavar="RE", help="only records whose text (any line) matches RE")
    parser.add_argument("--node", metavar="GLOB", help="only records about a matching GradNode (node=...)")
    parser.add_argument("--since", metavar="TIME", help="from this time on: HH:MM[:SS[.f]] or a full date and time")
    parser.add_argument("--until", metavar="TIME", help="up to this time (inclusive), same forms as --since")


def _parse_time(option: str, text: str) -> tuple[str, _dt.datetime]:
    for kind, formats in (("full", _TIME_FORMATS), ("day", _DAY_FORMATS), ("tod", _TOD_FORMATS)):
        for time_format in formats:
            try:
                return kind, _dt.datetime.strptime(text.strip().replace("T", " "), time_format)
            except ValueError:
                continue
    raise InputError(f"{option} {text!r}: expected HH:MM[:SS[.ffffff]], MMDD HH:MM:SS or YYYY-MM-DD HH:MM:SS")


def _resolve(option: str, text: str, first_local: _dt.datetime) -> _dt.datetime:
    """A full local time. A time of day is on the first record's date, unless that is more than 12 hours
    before the first record: then on the next day (a log from 23:50 on, `--since 00:10`). So a time typed
    just before the first record (`--since 09:25` for a log from 09:25:49) is that day's, not tomorrow's;
    in a log longer than a day, MMDD or a full date picks the day. glog's MMDD is in the first record's
    year, or the next."""
    kind, when = _parse_time(option, text)
    if kind == "full":
        return when
    if kind == "day":
        when = when.replace(year=first_local.year)
        return when if when >= first_local - _dt.timedelta(days=1) else when.replace(year=first_local.year + 1)
    when = _dt.datetime.combine(first_local.date(), when.time())
    return when if when >= first_local - _dt.timedelta(hours=12) else when + _dt.timedelta(days=1)


class Select:
    """The filters of one merge; `prepare` once the first timestamp is known, then call per block."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.ranks = np.array(parse_int_list("--ranks", args.ranks), np.int64) if args.ranks else None
        self.min_level = fmt.SEVERITIES.index(args.min_severity) if args.min_severity else 0
        self.min_v, self.max_v = args.min_v, args.max_v
        try:
            self.grep = re.compile(args.grep.encode()) if args.grep else None
        except re.error as exc:
            raise InputError(f"--grep {args.grep!r}: not a valid regular expression ({exc})") from None
        self.node = re.compile(fnmatch.translate(args.node)) if args.node else None
        self._times = (args.since, args.until)
        for option, text in zip(("--since", "--until"), self._times):
            if text:
                _parse_time(option, text)  # a typo is an error before the inputs are read (and warned about)
        self.since = self.until = None

    def prepare(self, first_ts: int | None, utc_offset_s: int) -> None:
        """Turn --since/--until into epoch µs: they are in the time zone the output shows."""
        first_local = _dt.datetime(1970, 1, 1) + _dt.timedelta(microseconds=(first_ts or 0) + utc_offset_s * 10**6)
        limits = []
        for option, text in zip(("--since", "--until"), self._times):
            when = _resolve(option, text, first_local) if text else None
            limits.append(
                None
                if when is None
                else (when - _dt.datetime(1970, 1, 1)) // _dt.timedelta(microseconds=1) - utc_offset_s * 10**6
            )
        self.since, self.until = limits

    def __call__(self, block: Block) -> np.ndarray:
        mask = np.ones(len(block), bool)
        if self.ranks is not None:
            mask &= np.isin(block.rank, self.ranks)
        if self.min_level:
            mask &= LEVEL[block.severity] >= self.min_level
        if self.since is not None:
            mask &= block.ts >= self.since
        if self.until is not None:
            mask &= block.ts <= self.until
        if self.grep is not None:
            mask &= block.matching(self.grep)
        if self.node is not None:
            mask &= self._decoded(block, _NODE_HINT, self._node_ok, False)
        if self.min_v is not None or self.max_v is not None:
            mask &= self._decoded(block, _V_HINT, lambda r: self._v_ok(r.v or 0), self._v_ok(0))
        return np.flatnonzero(mask)

    @staticmethod
    def _decoded(block: Block, hint: re.Pattern[bytes], test: Callable[[Record], bool], default: bool) -> np.ndarray:
        """`test` on the decoded records whose text the hint regex finds; `default` for all others."""
        out = np.full(len(block), default)
        for i in np.flatnonzero(block.matching(hint)).tolist():
            out[i] = test(block.record(i))
        return out

    def _node_ok(self, record: Record) -> bool:
        node = record.fields.get(fmt.NODE)
        if node is None:
            node = fmt.node_label_in(record.event.partition("\n")[0])
        return node is not None and self.node.match(str(node)) is not None

    def _v_ok(self, v: int) -> bool:
        return (self.min_v is None or v >= self.min_v) and (self.max_v is None or v <= self.max_v)
