"""A `Source`: one input file, read a block of whole records at a time (see the package's docstring)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import format as fmt
from ...errors import InputError
from . import _evidence, _header, _jsonl
from ._arena import SLOT_BYTES, Slot, plain_alloc
from ._block import Block, Counts
from ._bytes import restamp
from ._files import BadFile, InputFile, open_input, rank_given
from ._foreign import NCCL_RANK
from ._glog import RECORD_LINES, GlogParser, RankRule, UnknownRank
from ._scan import OURS, PAD, Calendar, detect_variant, line_starts
from ._stream import ByteStream

CHUNK = SLOT_BYTES - PAD
EVIDENCE = "evidence"  # another program's file, converted to records (_evidence), beside "jsonl" and "glog"
_CREATED = re.compile(r"([0-9]{4})-([0-9]{2})")  # the meta record's year and month (ASCII digits only)
HEAD_BYTES = 64 << 10
_EMPTY = np.zeros(
    0, np.uint8
)  # (a consumed read-ahead lets go of its buffer)  # read at least this much first: the header and first records tell the format
Alloc = Callable[[int], Slot]


class Source:
    """One input file: what its header says (rank, host, clock, year) and its records, a block at a time."""

    def __init__(self, file: InputFile, order: int, rank_of: dict[str, int], clock_correction: bool) -> None:
        self.file, self.path, self.order = file, file.path, order
        self.notes: list[str] = []  # what to warn about once the inputs are open
        if file.reader:
            explicit = rank_given(rank_of, file.path)
            rank = explicit if explicit is not None else file.name_rank
            self.stream: _evidence.Converted | ByteStream
            self.stream, self.notes = _evidence.convert(file.path, file.reader, rank)
        else:
            self.stream = open_input(file)
        self.size = self.stream.size
        self.counts = Counts()
        self._stream_done = self._done = False
        self.meta: dict | None = None
        self.metas: list[dict] = []
        self.host: str | None = None
        self.utc_offset_s: int | None = None  # None until open_sources picks one for a foreign file
        self.clock = _header.Clock()
        self.display_offset_s: int | None = None  # set by merge: the time zone its output shows
        self.chunk: int | None = None  # bytes read per block (None: CHUNK); merge sets less for many inputs
        self._head = np.zeros(0, np.uint8)  # read ahead to learn the format; blocks take it first
        self._carry, self._opening = self._head, True
        self._unparsed = False  # the carry holds whole lines the last parse left for the next
        self._rank_rule: RankRule | None = None
        self._calendar: Calendar | None = None
        self._parser: GlogParser | None = None
        try:
            if file.reader:
                self._open_evidence(rank_given(rank_of, self.path))
            else:
                self._open(rank_of, clock_correction)
        except BaseException:
            self.stream.close()
            raise
        if self.stream.rewind():  # read again from the start when blocks are read: no read-ahead held per file
            self._head = self._carry = _EMPTY
            self._stream_done = False

    def read_flight(self) -> Any:
        """A Flight Recorder dump's columns (`_flight.Dump`) read in place of its records (counted as read:
        what its entries say, without a record made of each); None for any other file."""
        dump = getattr(self.stream, "flight", None)
        if dump is not None and not self._done:
            n = dump.records_count()
            self.counts.lines += n
            self.counts.records[self.rank] += n
            self._done = True
            self.stream.close()
        return dump

    # -- opening: what the first chunk says ----------------------------------------------------------------
    def _open(self, rank_of: dict[str, int], clock_correction: bool) -> None:
        first = np.empty(HEAD_BYTES + PAD, np.uint8)
        n = self._fill(first, 0, HEAD_BYTES)
        self._head, self._opening = first[:n], False
        self.kind = "jsonl" if first[:n].tobytes().lstrip()[:1] == b"{" else "glog"
        self.metas = _header.metas_in(first[:n].tobytes())  # which processes' records it holds (see _runs)
        explicit = rank_given(rank_of, self.path)
        (self._open_jsonl if self.kind == "jsonl" else self._open_glog)(first[: n + PAD], n, explicit)
        if self.meta:
            if explicit is not None and explicit != self.meta["rank"]:
                raise InputError(
                    f"{self.path}: its distvlog header says rank {self.meta['rank']}; "
                    f"--rank-of is for files without one"
                )
            self.host = self.meta.get("host") or self.host
            self.utc_offset_s = _header.Clock.zone(self.meta)
            if clock_correction:
                self.clock = _header.Clock.from_meta(self.meta)

    def _open_evidence(self, explicit: int | None) -> None:
        """Converted records: their rank is the first one's (the reader's, else --rank-of's or the layout's)."""
        self.kind = EVIDENCE
        first = self.stream.first
        rank = first.get(fmt.RANK) if first is not None else None
        self.rank = (
            explicit if explicit is not None else rank if type(rank) is int and rank >= 0 else self.file.name_rank
        )
        if self.rank is None:
            raise InputError(f"{self.path}: cannot tell which rank wrote it; pass --rank-of {self.path}=R")

    def _open_jsonl(self, data: np.ndarray, n: int, explicit: int | None) -> None:
        first_line, newline, _ = data[:n].tobytes().lstrip().partition(b"\n")
        obj = fmt.parse_json(first_line)
        if obj is None and (newline or not self._stream_done):
            raise BadFile(f"{self.path}: not a glog or JSON-lines log (the first line is not a JSON object)")
        # (else the file's only line, cut short inside the meta record: no records)
        self.meta = fmt.meta_of(obj) if obj is not None else None
        rank = obj.get(fmt.RANK) if obj is not None else None
        self.rank = (
            self.meta["rank"]
            if self.meta
            else explicit
            if explicit is not None
            else (rank if type(rank) is int and rank >= 0 else self.file.name_rank)
        )
        if self.rank is None:
            raise InputError(f"{self.path}: cannot tell which rank wrote it; pass --rank-of {self.path}=R")

    def _open_glog(self, data: np.ndarray, n: int, explicit: int | None) -> None:
        starts, complete = line_starts(data, n)
        if complete < n:  # the first chunk ends mid-line
            starts = np.append(starts, complete)
        variant = detect_variant(data, starts)
        lines = [data[s:e].tobytes().rstrip(b"\r\n") for s, e in zip(starts[:8], np.append(starts[1:9], n))]
        head = list(itertools.takewhile(fmt.is_header_line, lines))  # the header: the lines before any record
        if variant is None:
            whole = lines[:-1] if complete < n else lines
            if len(head) >= len(whole):  # nothing logged yet, or cut short
                variant = OURS
            else:
                raise BadFile(f"{self.path}: not a glog or JSON-lines log (no line starts a record)")
        self.host = fmt.host_of(head)
        first = fmt.parse_glog(lines[len(head)].decode("utf-8", "replace")) if len(head) < len(lines) else None
        self.meta = fmt.meta_of(first) if first is not None and not fmt.is_merged(head) else None
        year = fmt.created_year(head)
        if self.meta:
            self.rank = int(self.meta["rank"])
            created = _CREATED.match(str(self.meta.get("created", "")))
            self._calendar = Calendar(int(created[1]), int(created[2])) if created else None
        else:
            text = data[:n].tobytes()
            tag = fmt.RANK_TAG_PATTERN.search(text) or (NCCL_RANK.search(text) if self.file.name_rank is None else None)
            default = int(tag.group(1)) if tag else self.file.name_rank
            self._rank_rule = RankRule(explicit, default)
            self.rank = explicit if explicit is not None else default
        if self._calendar is None:
            self._calendar = Calendar(year)
        self._variant = variant

    # -- reading -----------------------------------------------------------------------------------------
    @property
    def eof(self) -> bool:
        return self._stream_done and not len(self._head)

    def _fill(self, view: np.ndarray, at: int, cap: int) -> int:
        """Fill view[at:cap] from the read-ahead, then the file; returns the new end."""
        take = min(cap - at, len(self._head))
        view[at : at + take] = self._head[:take]
        self._head, at = (self._head[take:] if take < len(self._head) else _EMPTY), at + take
        while at < cap and not self._stream_done:
            got = self.stream.readinto(view[at:cap])
            self._stream_done = not got
            at += got
        if self._stream_done and self.stream.damage and self._opening and not at:
            raise BadFile(f"{self.path}: cannot read ({self.stream.damage})")
        return at

    def progress(self) -> int:
        """Bytes of the file (on disk) read so far."""
        return self.stream.progress()

    def next_block(self, alloc: Alloc = plain_alloc) -> Block | None:
        """The next records of this file (a block may be empty), None after the last."""
        if self._done:
            return None
        if self.kind == EVIDENCE:
            return self._evidence_block(alloc)
        carry = self._carry
        # (carried lines not yet parsed: parse them before reading more)
        size = len(carry) if self._unparsed else max(self.chunk or CHUNK, 2 * len(carry))
        slot = alloc(size + PAD)
        slot.view[: len(carry)] = carry
        n = self._fill(slot.view, len(carry), size)
        try:
            block = self._parse(slot, n, alloc)
        except UnknownRank:
            slot.release()
            raise InputError(
                f"{self.path}: cannot tell which rank wrote some records (no distvlog header, "
                f"no [rank R] tag); pass --rank-of {self.path}=R"
            ) from None
        self.counts.cut = self.stream.cut_lines
        if self.eof and not len(self._carry):
            self._done = True
            if self.stream.damage:
                self.counts.damage.append(self.stream.damage)
            self.stream.close()
        return block

    def _evidence_block(self, alloc: Alloc) -> Block | None:
        """The next records converted from another program's file: already objects, nothing to parse."""
        records = self.stream.next_records(self.chunk or CHUNK)
        if records is None:
            self._done = True
            self.stream.close()
            return None
        made = records.texts(_jsonl.PLACEHOLDER) if records.texts else None
        parsed = _jsonl.from_objects(records, self.rank, Counts(), made=made)
        return self._block(parsed, np.frombuffer(parsed.text, np.uint8), parsed.objs, None, alloc)

    def _parse(self, slot: Slot, n: int, alloc: Alloc) -> Block:
        if self.kind == "jsonl":
            parsed = _jsonl.parse(slot.view, n, self.eof, self.rank)
            text, objs = np.frombuffer(parsed.text, np.uint8), parsed.objs
        else:
            upto = _lines_end(slot.view, n, RECORD_LINES)  # (a chunk of short lines: parsed in parts)
            parsed = self._glog_parser().parse(slot.view, upto, self.eof and upto == n)
            text, objs = parsed.data, None
            self._unparsed = upto < n
            if self._unparsed:
                parsed.carry = np.concatenate((parsed.carry, slot.view[upto:n]))
        self._carry = parsed.carry
        return self._block(parsed, text, objs, slot, alloc)

    def _block(self, parsed: Any, text: np.ndarray, objs: Any, slot: Slot | None, alloc: Alloc) -> Block:
        """The parsed records as a block, in `slot` when their text is there, else copied into one."""
        self.counts.add(parsed.counts)
        ts = parsed.ts if self.kind == "glog" else self.clock.correct(parsed.ts)
        if slot is None or text is not slot.view:  # rewritten records: into a slot of their own
            if slot is not None:
                slot.release()
            slot = alloc(len(text) + PAD)
            slot.view[: len(text)] = text
        end = parsed.end if self.kind == "glog" else np.append(parsed.start[1:], len(text))
        block = Block(self, slot, slot.base + parsed.start, slot.base + end, ts, parsed.rank, parsed.severity, objs)
        display = self.display_offset_s if self.display_offset_s is not None else self.utc_offset_s
        if self.kind != "glog" or self._parser.needs_restamp():
            restamp(slot.view, parsed.start, ts + display * 1_000_000)
        return block

    def _glog_parser(self) -> GlogParser:
        if self._parser is None:
            self._parser = GlogParser(
                self._variant,
                self._calendar,
                self.utc_offset_s,
                self.clock,
                self._rank_rule,
                self.rank if self.rank is not None else -1,
                strict=self._rank_rule is None and self.meta is not None and self.meta.get("distvlog") == fmt.VERSION,
            )
            if self.display_offset_s is not None:
                self._parser.display_offset_us = self.display_offset_s * 1_000_000
        return self._parser

    def close(self) -> None:
        self.stream.close()


def _lines_end(data: np.ndarray, n: int, lines: int) -> int:
    """Where the first `lines` lines of data[:n] end (n when it has fewer)."""
    if n <= lines:
        return n
    newlines = np.flatnonzero(data[:n] == 10)
    return int(newlines[lines - 1]) + 1 if len(newlines) > lines else n
