"""Writing merged batches: glog text (one gather per batch, written by a second thread) or JSON lines.

The text output is itself a glog file: glog's header lines (plus one saying it is a merge, which tells
the reader not to apply a rank's header to it), then every record in our form, tagged `[rank R]`.
"""

from __future__ import annotations

import datetime as _dt
import queue
import threading

import numpy as np

from ... import format as fmt
from ..output import write_all
from ..read import take
from ._kway import Batch


def text_header(
    first_ts: int | None, utc_offset_s: int, hosts: list[str], files: int, corrected: bool, metas: list[dict]
) -> bytes:
    local = _dt.datetime(1970, 1, 1) + _dt.timedelta(microseconds=(first_ts or 0) + utc_offset_s * 10**6)
    sign, off = ("+" if utc_offset_s >= 0 else "-"), abs(utc_offset_s) // 60
    clock = "clocks corrected to rank 0" if corrected else "no clock correction"
    what = f"{files} file{'s' * (files != 1)}, {clock}, times in UTC{sign}{off // 60:02d}:{off % 60:02d}"
    return fmt.merged_header(f"{local:%Y/%m/%d %H:%M:%S}", hosts, what, metas)


def batch_text(batch: Batch) -> memoryview:
    """The batch's records as one buffer, in order: a single take over the buffers that hold them."""
    groups: dict[int, list[int]] = {}
    for pos, block in enumerate(batch.blocks):
        groups.setdefault(id(block.slot.buffer), []).append(pos)
    buffers, cuts = [], []
    first_element = np.empty(len(batch.blocks), np.int64)
    elements = 0
    for positions in groups.values():
        positions.sort(key=lambda p: int(batch.blocks[p].start[0]))
        first, last = batch.blocks[positions[0]], batch.blocks[positions[-1]]
        lo, hi = int(first.start[0]), int(last.end[-1])  # only this span: arrow sizes its output by it
        parts, records = [], 0
        for p in positions:  # elements: record, gap, record, gap, ... (see Block.cuts)
            first_element[p] = elements + 2 * records
            parts.append(batch.blocks[p].cuts())
            records += len(batch.blocks[p])
        buffers.append(first.slot.buffer[lo:hi])
        cuts.append(np.concatenate(parts) - lo)
        elements += 2 * records - 1
    return take(buffers, cuts, first_element[batch.which] + 2 * batch.index)


class Writer:
    """Encodes each batch in this thread and writes it from another, so the two overlap."""

    def __init__(self, fd: int, header: bytes = b"") -> None:
        self.fd = fd
        self._queue: queue.Queue = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name="distvlog-merge-writer", daemon=True)
        self._thread.start()
        self._queue.put(header)

    def encode(self, batch: Batch) -> memoryview | bytes:
        return batch_text(batch)

    def write(self, batch: Batch) -> None:
        data = self.encode(batch)
        if self._error is not None:
            raise self._error
        self._queue.put(data)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def _drain(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is None:
                try:
                    write_all(self.fd, item)
                except BaseException as exc:  # noqa: BLE001 (handed to the main thread)
                    self._error = exc


class JsonWriter(Writer):
    """One JSON object per record, like our JSON-lines files (ts on rank 0's clock, rank, world_size, ...)."""

    def encode(self, batch: Batch) -> bytes:
        out = []
        for which, i in zip(batch.which.tolist(), batch.index.tolist()):
            block = batch.blocks[which]
            world = (block.source.meta or {}).get("world_size")
            out.append(fmt.json_record(block.record(i).as_json(world)))
        return b"".join(out)
