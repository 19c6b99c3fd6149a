"""Clock offsets to rank 0, measured by ping-pong and written into each rank's file header for `merge`.

Rank 0 pings every other rank in turn, several rounds each. A round gives rank 0's send time `t0`, the
rank's reply time `tr` and rank 0's receive time `t1`; rank 0's clock read `t0 + rtt/2` when the rank read
`tr`, so the offset to ADD to that rank's timestamps is `t0 + rtt/2 - tr`, uncertain by ±rtt/2. The round
with the smallest round trip wins (oversubscribed cores make most rounds slow, not wrong). Ranks wait for
their turn sleeping, not spinning, so they do not steal the CPU from the pair being measured.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from ..logger import SINK, now_us

if TYPE_CHECKING:
    from mpi4py import MPI

ROUNDS = 12
_PING, _PONG, _RESULT = 11, 12, 13


def _wait(request: MPI.Request) -> None:
    while not request.Test():
        time.sleep(0.0002)


def _measure_rank(comm: MPI.Intracomm, peer: int, rounds: int) -> tuple[float, float]:
    """Rank 0's side with one peer: (offset, uncertainty) in µs."""
    ping, pong = np.zeros(1, np.int64), np.zeros(1, np.int64)
    best = (0.0, float("inf"))
    for _ in range(rounds):
        t0 = now_us()
        comm.Send(ping, dest=peer, tag=_PING)
        comm.Recv(pong, source=peer, tag=_PONG)
        t1 = now_us()
        half = (t1 - t0) / 2
        if half < best[1]:
            best = (t0 + half - int(pong[0]), half)
    return best


def measure(comm: MPI.Intracomm, rounds: int = ROUNDS) -> tuple[float, float]:
    """Collective: this rank's clock offset to rank 0 and its uncertainty, in µs (rank 0: 0, 0)."""
    result = np.zeros(2, np.float64)
    if comm.rank == 0:
        for peer in range(1, comm.size):
            result[:] = _measure_rank(comm, peer, rounds)
            comm.Send(result, dest=peer, tag=_RESULT)
        return 0.0, 0.0
    ping, pong = np.zeros(1, np.int64), np.zeros(1, np.int64)
    _wait(comm.Irecv(ping, source=0, tag=_PING))
    for i in range(rounds):
        if i:
            comm.Recv(ping, source=0, tag=_PING)
        pong[0] = now_us()
        comm.Send(pong, dest=0, tag=_PONG)
    _wait(comm.Irecv(result, source=0, tag=_RESULT))
    return float(result[0]), float(result[1])


def record(comm: MPI.Intracomm, slot: str) -> tuple[float, float]:
    """Collective: measure this rank's offset and write it into the header's `slot` (clock_start/_end).
    Flushes first: a rank may wait here for a dead one until the launcher kills it."""
    SINK.flush()
    offset, uncertainty = measure(comm)
    SINK.set_clock(slot, offset, uncertainty, now_us())
    return offset, uncertainty
