"""Byte-level bulk operations: gather many byte ranges into one buffer, rewrite glog timestamps in place.

Gathering uses pyarrow's `take` over a binary array whose elements are the ranges between cut points: one
memcpy per range in C. numpy has no variable-length gather (a per-byte index costs ~10x more).
"""

from __future__ import annotations

import datetime as _dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_DAY_US = 86_400_000_000


def take(buffers: list[np.ndarray], cuts: list[np.ndarray], index: np.ndarray) -> memoryview:
    """Concatenate elements `index` (in that order) of the buffers, each cut into elements at `cuts`.

    `cuts[b]` is non-decreasing from 0 to len(buffers[b]); element i of buffer b is
    buffers[b][cuts[b][i]:cuts[b][i+1]], and element numbers continue from one buffer to the next.
    """
    arrays = [pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(c) - 1, [None, pa.py_buffer(c),
                                                                                pa.py_buffer(b)])
              for b, c in zip(buffers, cuts)]
    values = arrays[0] if len(arrays) == 1 else pa.chunked_array(arrays)
    out = pc.take(values, pa.array(index, pa.int64()))
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    offsets = np.frombuffer(out.buffers()[1], np.int64, len(out) + 1, out.offset * 8)
    return memoryview(out.buffers()[2])[offsets[0]:offsets[-1]]


def _day_text(day: int) -> bytes:
    return (_dt.date(1970, 1, 1) + _dt.timedelta(days=day)).strftime("%m%d").encode()


def restamp(data: np.ndarray, starts: np.ndarray, local_us: np.ndarray) -> None:
    """Overwrite the `mmdd hh:mm:ss.uuuuuu` after each record's severity letter with `local_us`.

    Digit columns only (the separators are in place already), each one scattered on its own: numpy is fast
    on 1-D columns and slow on narrow 2-D rows. Divisions are by scalars (numpy's divmod is ~30x slower)."""
    if not len(starts):
        return
    at = starts + 1
    day = local_us // _DAY_US
    tod = local_us - day * _DAY_US
    firsts = np.concatenate(([0], np.flatnonzero(day[1:] != day[:-1]) + 1))
    table = np.frombuffer(b"".join(_day_text(d) for d in day[firsts].tolist()), np.uint8).reshape(-1, 4)
    which = np.repeat(np.arange(len(firsts)), np.diff(np.append(firsts, len(day)))) if len(firsts) > 1 else 0
    for col in range(4):
        data[at + col] = table[which, col]
    sec = tod // 1_000_000
    micro = (tod - sec * 1_000_000).astype(np.int32)
    sec = sec.astype(np.int32)
    hour = sec // 3600
    minute = (sec - hour * 3600) // 60
    for col, value in ((5, hour), (8, minute), (11, sec - hour * 3600 - minute * 60)):
        tens = value // 10
        data[at + col] = 48 + tens
        data[at + col + 1] = 48 + value - tens * 10
    for col in range(19, 13, -1):
        rest = micro // 10
        data[at + col] = 48 + micro - rest * 10
        micro = rest
