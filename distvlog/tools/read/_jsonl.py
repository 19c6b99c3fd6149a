"""Turning a chunk of JSON lines into a block: one object per line, also rendered as our glog text.

JSON lines are decoded one by one (orjson, through the format's JSON mapping); they are the slower input,
and the glog text is what the merge writes, greps and filters. Padding (NUL runs) is skipped and cuts the
line before it; a line that is cut (by padding or the end of the file) is a torn record, any other line
that is not a JSON object with an integer `ts` is skipped and counted (distvlog.format, sections 3 and 5).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import format as fmt
from ._block import Counts
from ._scan import MAX_US, MIN_US, OUT_OF_RANGE, UNPLACED

PLACEHOLDER = "0" * len(fmt.STAMP)  # the timestamp, written afterwards by _bytes.restamp
_PADDING = re.compile(rb"\0+")
_NONE = np.zeros(0, np.uint8)


@dataclass
class ParsedJson:
    text: bytes
    start: np.ndarray
    ts: np.ndarray
    rank: np.ndarray
    severity: np.ndarray
    objs: Sequence[dict[str, Any]]
    carry: np.ndarray  # the chunk's last bytes, which belong to the next chunk (a copy)
    counts: Counts


def parse(data: np.ndarray, n: int, eof: bool, own_rank: int) -> ParsedJson:
    counts = Counts()
    raw = data[:n].tobytes()
    end = n if eof else raw.rfind(b"\n") + 1
    objs = []
    lines = raw[:end].split(b"\n")
    last = lines.pop()  # b"" when the chunk ends with a newline, else a line cut by the end of the file
    pieces = [(line, True) for line in lines] + ([(last, False)] if last else [])
    for line, whole in pieces:
        if b"\0" in line:  # padding: the text before each run is cut by it
            *cut, line = _PADDING.split(line)
            for piece in cut:
                if piece:
                    counts.torn += 1
                    counts.skipped[fmt.TORN] += 1
            if not line:
                continue
        if not line.strip():
            counts.skipped["empty line"] += 1
            continue
        obj = fmt.parse_json(line) if whole else None
        if obj is None:
            if not whole:
                counts.torn += 1
                counts.skipped[fmt.TORN] += 1
            else:
                counts.skipped[fmt.STRAY + " (not a JSON object)"] += 1
            continue
        objs.append(obj)
    return from_objects(objs, own_rank, counts, data[end:n].copy())


def from_objects(
    objs: Sequence[dict[str, Any]],
    own_rank: int,
    counts: Counts,
    carry: np.ndarray = _NONE,
    made: Sequence[bytes] | None = None,
) -> ParsedJson:
    """Decoded records (JSON lines', or other programs' evidence converted) as a block's columns and glog
    text (`made`: each object's text, written with PLACEHOLDER, where the reader has it); objects without an
    integer `ts` in range are skipped and counted. `objs` is kept as given (a lazy sequence stays lazy) when
    every object is a record."""
    kept, texts, ts, ranks = [], [], [], []
    for i, obj in enumerate(objs):
        if type(obj.get(fmt.TS)) is not int:
            counts.skipped["JSON without an integer ts"] += 1
            continue
        if not MIN_US <= obj[fmt.TS] <= MAX_US:
            counts.skipped[UNPLACED[OUT_OF_RANGE]] += 1
            continue
        rank = obj.get(fmt.RANK)
        rank = rank if type(rank) is int and rank >= 0 else own_rank
        kept.append(obj)
        ts.append(obj[fmt.TS])
        ranks.append(rank)
        texts.append(
            made[i]
            if made is not None
            else fmt.json_to_glog(obj, rank, PLACEHOLDER).encode("utf-8", "backslashreplace")
        )
    objs = objs if len(kept) == len(objs) else kept
    counts.lines += len(objs)
    rank_arr = np.array(ranks, np.int64)
    uniq, per = np.unique(rank_arr, return_counts=True)
    counts.records.update(dict(zip(uniq.tolist(), per.tolist())))
    lengths = np.fromiter(map(len, texts), np.int64, len(texts))
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])) if len(texts) else np.zeros(0, np.int64)
    severity = np.frombuffer(b"".join(t[:1] for t in texts), np.uint8).copy()
    return ParsedJson(
        b"".join(texts),
        starts.astype(np.int64),
        np.array(ts, np.int64),
        rank_arr,
        severity,
        objs,
        carry,
        counts,
    )
