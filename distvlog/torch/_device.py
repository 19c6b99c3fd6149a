"""Statistics of device tensors without a sync per record: computed on the device, copied to the host
asynchronously, logged when they arrive, in the order they were asked for.

`.item()`, `.cpu()` or hashing host bytes per DDP bucket would wait for the device each time, and so
serialise the allreduce overlap that makes DDP fast. Here one small int64 tensor per request holds the L2
norm's square, NaN and Inf counts, min, max, sum and count of the finite values (float64 bits) and a checksum
(a position-weighted integer sum over the tensor's 32-bit words, wrapping as int64: bit-exact, deterministic
on any one device type, but not the host's XXH3). It is copied with `non_blocking=True` into pinned memory and
a CUDA event marks when it is there; `drain()` emits every request whose event has completed, oldest first,
stopping at the first still on its way. CPU tensors take the same path (the copy is done at once), which is
how the CPU tests exercise it; the CPU job itself keeps the host statistics, which are faster there.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import math
import os
import threading
from collections.abc import Callable
from typing import Any

import torch

_WORDS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int32}  # itemsize -> integer view


class DeviceValues:
    """The statistics of one tensor as they arrived on the host."""

    __slots__ = ("norm", "nan", "inf", "min", "max", "mean", "checksum")

    def __init__(self, host: torch.Tensor) -> None:
        squares, low, high, total, count = host[:5].view(torch.float64).tolist()
        self.nan, self.inf = int(host[5]), int(host[6])
        self.norm = math.sqrt(squares)
        self.min, self.max = (low, high) if count else (math.nan, math.nan)
        self.mean = total / count if count else math.nan
        self.checksum = f"{int(host[7]) & (2**64 - 1):016x}"


def device_stats(t: torch.Tensor) -> torch.Tensor:
    """The statistics of `t` as one int64 tensor on its device (no host sync)."""
    flat = t.detach().reshape(-1)
    wide = flat.double() if flat.is_floating_point() else flat.to(torch.float64)
    nan, inf = torch.isnan(wide), torch.isinf(wide)
    finite = wide.masked_fill(nan | inf, 0.0)
    count = flat.numel() - (nan | inf).sum()
    empty = finite.numel() == 0
    none = torch.zeros((), dtype=torch.float64, device=t.device)
    low = none if empty else wide.masked_fill(nan | inf, math.inf).min()
    high = none if empty else wide.masked_fill(nan | inf, -math.inf).max()
    floats = torch.stack([finite.square().sum(), low, high, finite.sum(), count.double()])
    words = _words(t)
    weights = torch.arange(words.numel(), device=t.device, dtype=torch.int64) * 2 + 1
    checksum = (words * weights).sum() + words.numel()
    return torch.cat([floats.view(torch.int64), torch.stack([nan.sum(), inf.sum(), checksum])])


def _words(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as int64 words (its memory in C order)."""
    raw = t.detach().contiguous().reshape(-1)
    if raw.dtype == torch.bool:
        raw = raw.to(torch.uint8)
    return raw.view(_WORDS[raw.element_size()]).to(torch.int64)


class DeviceStats:
    """The requests on their way to the host, oldest first."""

    def __init__(self) -> None:
        self.queue: collections.deque = collections.deque()
        self.lock = threading.Lock()  # DDP completes allreduces on a thread of its own

    def submit(self, tensors: list[torch.Tensor], emit: Callable[[list[DeviceValues]], Any]) -> None:
        """Compute each tensor's statistics on its device and copy them to the host in one copy without
        waiting; `emit` gets them (from this or a later `drain`)."""
        stats = torch.stack([device_stats(t) for t in tensors])
        if stats.is_cuda:
            host = torch.empty(stats.shape, dtype=stats.dtype, pin_memory=True)
            host.copy_(stats, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
        else:
            host, event = stats, None
        with self.lock:
            self.queue.append((event, host, emit))
        self.drain()

    def drain(self, wait: bool = False) -> None:
        """Emit the requests that have arrived, in order (all of them, waiting, with `wait`)."""
        while True:
            with self.lock:
                if not self.queue:
                    return
                event, host, emit = self.queue[0]
                if event is not None and not event.query():
                    if not wait:
                        return
                    event.synchronize()
                self.queue.popleft()
            emit([DeviceValues(row) for row in host])


def on_device(t: torch.Tensor) -> bool:
    """Whether `t`'s statistics take the device path: off the CPU, or everywhere with DISTVLOG_DEVICE_STATS=1
    (to compare both paths on a CPU machine)."""
    return t.device.type != "cpu" or _FORCED


_FORCED = os.environ.get("DISTVLOG_DEVICE_STATS", "") == "1"
PENDING = DeviceStats()


@atexit.register
def _last() -> None:
    """The statistics still on their way when the job ends reach the file."""
    with contextlib.suppress(Exception):
        PENDING.drain(wait=True)
