"""Byte-level bulk operations: gather many byte ranges into one buffer, rewrite glog timestamps in place.

Gathering uses pyarrow's `take` over a binary array whose elements are the ranges between cut points: one
memcpy per range in C. numpy has no variable-length gather (a per-byte index costs ~10x more).
"""

from __future__ import annotations

import datetime as _dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.lib.stride_tricks import as_strided

_DAY_US = 86_400_000_000
_US_DIGITS = 10 ** np.arange(5, -1, -1, dtype=np.int64)


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
    return (_dt.date(1970, 1, 1) + _dt.timedelta(days=day)).strftime("%m%d ").encode()


def stamp_digits(local_us: np.ndarray) -> np.ndarray:
    """`mmdd hh:mm:ss.uuuuuu` (20 bytes per row) for local-time microseconds since 1970."""
    out = np.empty((len(local_us), 20), np.uint8)
    day, tod = np.divmod(local_us, _DAY_US)
    cut = np.flatnonzero(day[1:] != day[:-1]) + 1
    firsts = np.concatenate(([0], cut))
    table = np.frombuffer(b"".join(_day_text(d) for d in day[firsts].tolist()), np.uint8).reshape(-1, 5)
    out[:, :5] = np.repeat(table, np.diff(np.concatenate((firsts, [len(day)]))), axis=0)
    sec, micro = np.divmod(tod, 1_000_000)
    hour, rest = np.divmod(sec, 3600)
    minute, second = np.divmod(rest, 60)
    for col, value in ((5, hour), (8, minute), (11, second)):
        out[:, col] = 48 + value // 10
        out[:, col + 1] = 48 + value % 10
    out[:, 7] = out[:, 10] = ord(":")
    out[:, 13] = ord(".")
    out[:, 14:20] = 48 + (micro[:, None] // _US_DIGITS) % 10
    return out


def restamp(data: np.ndarray, starts: np.ndarray, local_us: np.ndarray) -> None:
    """Overwrite the timestamp after each record's severity letter (bytes 1-20) with `local_us`."""
    if not len(starts):
        return
    rows = as_strided(data, shape=(len(data) - 20, 20), strides=(1, 1))
    rows[starts + 1] = stamp_digits(local_us)
