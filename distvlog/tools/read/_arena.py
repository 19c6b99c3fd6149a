"""Memory for the blocks being merged: fixed-size slots carved out of one big buffer, reused.

The merge writes records from every live block with one `take` over a single binary array; that is only
cheap when all live blocks share one buffer (a take over several buffers copies them all first). Slots are
reused lowest-first, so the memory actually touched stays a few slots per input however big the input is.
Slots are taken on the merge's read-ahead threads and given back on the main one, under a lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

SLOT_BYTES = 4 << 20


@dataclass(eq=False)
class Slot:
    """`view` is the slot's memory; records in it are addressed by `base + offset` in `buffer`."""

    buffer: np.ndarray
    base: int
    view: np.ndarray
    owner: Arena | None = None
    index: int = -1

    def release(self) -> None:
        if self.owner is not None:
            with self.owner.lock:
                self.owner.free.append(self.index)
                self.owner.free.sort(reverse=True)
            self.owner = None


class Arena:
    """`nslots` slots of `slot_bytes` in one buffer (virtual memory: untouched slots cost nothing)."""

    def __init__(self, nslots: int = 64, slot_bytes: int = SLOT_BYTES) -> None:
        self.slot_bytes = slot_bytes
        self.buffer = np.empty(nslots * slot_bytes, np.uint8)
        self.free = list(range(nslots - 1, -1, -1))
        self.lock = threading.Lock()

    def alloc(self, nbytes: int) -> Slot:
        """A slot of at least `nbytes`; one of its own (outside the shared buffer) when none fits."""
        with self.lock:
            index = self.free.pop() if nbytes <= self.slot_bytes and self.free else None
        if index is None:
            buffer = np.empty(nbytes, np.uint8)
            return Slot(buffer, 0, buffer)
        base = index * self.slot_bytes
        return Slot(self.buffer, base, self.buffer[base : base + self.slot_bytes], self, index)


def plain_alloc(nbytes: int) -> Slot:
    """A fresh buffer per block: for readers that look at one block at a time."""
    buffer = np.empty(nbytes, np.uint8)
    return Slot(buffer, 0, buffer)
