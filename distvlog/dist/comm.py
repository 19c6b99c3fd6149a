"""MPI for distvlog: mpi4py is imported only when a communicator is needed, and distvlog's own traffic
(clock sync, debug checks, log gathering) runs on private duplicates of COMM_WORLD, so it can never be
matched with a collective of the user's code.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..logger import IDENTITY

if TYPE_CHECKING:
    from mpi4py import MPI

_world: MPI.Intracomm | None = None
_private: dict[str, MPI.Intracomm] = {}


def world() -> MPI.Intracomm:
    """COMM_WORLD, initialising MPI on first use (no collective), with IDENTITY set from it."""
    global _world
    if _world is None:
        from mpi4py import MPI

        _world = MPI.COMM_WORLD
        IDENTITY.rank, IDENTITY.world_size = _world.rank, _world.size
    return _world


def private(purpose: str) -> MPI.Intracomm:
    """distvlog's own duplicate of COMM_WORLD for `purpose` (collective the first time it is asked for)."""
    comm = _private.get(purpose)
    if comm is None:
        comm = _private[purpose] = world().Dup()
        comm.Set_name(f"distvlog-{purpose}")
    return comm


def ranks_text(ranks: Iterable[int]) -> str:
    """`rank 3` or `ranks 0,2,3`: how errors and reports name a group of ranks."""
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ",".join(map(str, ranks))
