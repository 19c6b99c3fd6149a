"""Byte-level bulk operations: gather many byte ranges into one buffer, rewrite glog timestamps in place.

Gathering uses pyarrow's `take` over a binary array whose elements are the ranges between cut points: one
memcpy per range in C. numpy has no variable-length gather (a per-byte index costs ~10x more). A small
gather joins the ranges in Python instead: importing pyarrow costs more than a small merge (~0.13 s).
"""

from __future__ import annotations

import datetime as _dt
import sys

import numpy as np

from ._scan import HOUR, MICROS, MINUTE, MONTH, SECOND, STAMP, spans

_DAY_US = 86_400_000_000
_STAMP = np.frombuffer(STAMP.encode(), np.uint8)  # what follows the severity letter (its separators)
_PAIRS = np.frombuffer(b"".join(b"%02d" % i for i in range(100)), "<u2")  # 0..99 as two ASCII digits
SMALL_TAKE = 2048  # elements up to which a Python join is faster than importing pyarrow


def take(buffers: list[np.ndarray], cuts: list[np.ndarray], index: np.ndarray) -> memoryview:
    """Concatenate elements `index` (in that order) of the buffers, each cut into elements at `cuts`.

    `cuts[b]` is non-decreasing from 0 to len(buffers[b]); element i of buffer b is
    buffers[b][cuts[b][i]:cuts[b][i+1]], and element numbers continue from one buffer to the next.
    """
    if len(index) <= SMALL_TAKE and "pyarrow" not in sys.modules:
        return _join(buffers, cuts, index)
    import pyarrow as pa
    import pyarrow.compute as pc

    arrays = [
        pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(c) - 1, [None, pa.py_buffer(c), pa.py_buffer(b)])
        for b, c in zip(buffers, cuts)
    ]
    values = arrays[0] if len(arrays) == 1 else pa.chunked_array(arrays)
    # from_buffers, not pa.array: that imports numpy.ma on first use (~20 ms of every merge)
    indices = pa.Array.from_buffers(pa.int64(), len(index), [None, pa.py_buffer(np.ascontiguousarray(index, np.int64))])
    # (malloc's pool, not arrow's default mimalloc: that keeps what a merge's many gathers freed, ~30 MB at
    # 1,024 inputs, bench_evidence, and is no faster here)
    pool = pa.system_memory_pool()
    out = pc.take(values, indices, memory_pool=pool)
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks(memory_pool=pool)
    offsets = np.frombuffer(out.buffers()[1], np.int64, len(out) + 1, out.offset * 8)
    return memoryview(out.buffers()[2])[offsets[0] : offsets[-1]]


def _join(buffers: list[np.ndarray], cuts: list[np.ndarray], index: np.ndarray) -> memoryview:
    starts = np.concatenate([c[:-1] for c in cuts])[index].tolist()
    ends = np.concatenate([c[1:] for c in cuts])[index].tolist()
    first = np.cumsum([0] + [len(c) - 1 for c in cuts])
    which = (np.searchsorted(first, index, "right") - 1).tolist()
    views = [memoryview(b) for b in buffers]
    return memoryview(b"".join([views[b][s:e] for b, s, e in zip(which, starts, ends)]))


def _day_text(day: int) -> bytes:
    return (_dt.date(1970, 1, 1) + _dt.timedelta(days=day)).strftime("%m%d").encode()


def _column(stamps: np.ndarray, col: int, dtype: str) -> np.ndarray:
    """Column `col` of the stamps as one value per stamp: 4 bytes ("<u4") or a digit pair ("<u2")."""
    return np.ndarray((len(stamps),), dtype, stamps, col, (stamps.shape[1],))


def restamp(data: np.ndarray, starts: np.ndarray, local_us: np.ndarray) -> None:
    """Overwrite the `mmdd hh:mm:ss.uuuuuu` after each record's severity letter with `local_us`.

    The stamps are built as the rows of one array, a column of digit pairs at a time (numpy is fast on
    columns and table lookups), then copied into place as whole 20-byte items. Divisions are by scalars
    (numpy's divmod is ~30x slower)."""
    if not len(starts):
        return
    stamps = np.empty((len(starts), len(_STAMP)), np.uint8)
    stamps[:] = _STAMP
    day = local_us // _DAY_US
    tod = local_us - day * _DAY_US
    firsts = np.concatenate(([0], np.flatnonzero(day[1:] != day[:-1]) + 1))
    mmdd = np.frombuffer(b"".join(_day_text(d) for d in day[firsts].tolist()), "<u4")
    _column(stamps, MONTH, "<u4")[:] = np.repeat(mmdd, np.diff(np.append(firsts, len(day))))
    sec = tod // 1_000_000
    micro = (tod - sec * 1_000_000).astype(np.int32)
    sec = sec.astype(np.int32)
    hour = sec // 3600
    minute = (sec - hour * 3600) // 60
    second = sec - hour * 3600 - minute * 60
    for col, pair in (
        (HOUR, hour),
        (MINUTE, minute),
        (SECOND, second),
        (MICROS, micro // 10_000),
        (MICROS + 2, micro // 100 % 100),
        (MICROS + 4, micro % 100),
    ):
        _column(stamps, col, "<u2")[:] = _PAIRS[pair]
    spans(data, len(_STAMP), 1)[starts] = stamps.view(f"V{len(_STAMP)}")[:, 0]
