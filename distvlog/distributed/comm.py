"""MPI for distvlog: mpi4py is imported only when a communicator is needed, and distvlog's own traffic
(clock sync, debug checks, log gathering) runs on private duplicates of COMM_WORLD, so it can never be
matched with a collective of the user's code.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..errors import InputError
from ..logger import IDENTITY, LAUNCHER_VARS, rank_from_env

if TYPE_CHECKING:
    from mpi4py import MPI

_world: MPI.Intracomm | None = None
_private: dict[str, MPI.Intracomm] = {}
# The MPI launchers among identity's LAUNCHER_VARS, by their rank variable, named for messages.
_MPI_LAUNCHERS = {
    "OMPI_COMM_WORLD_RANK": "Open MPI's mpirun",
    "PMI_RANK": "a PMI launcher (MPICH's or Intel MPI's mpirun, srun --mpi=pmi2)",
}


def world() -> MPI.Intracomm:
    """COMM_WORLD, initialising MPI on first use (no collective), with IDENTITY set from it."""
    global _world
    if _world is None:
        from mpi4py import MPI

        _check_launch()
        _world = MPI.COMM_WORLD
        IDENTITY.rank, IDENTITY.world_size = _world.rank, _world.size
    return _world


def library_name(version: str) -> str:
    """`Open MPI v4.1.4` or `MPICH Version: 5.0.2`, from MPI_Get_library_version's text."""
    return " ".join(version.splitlines()[0].split(",")[0].split())


def _check_launch() -> None:
    """A launcher of one MPI with mpi4py on another's libmpi starts N ranks that each find a COMM_WORLD of
    their own: the job would run N copies of rank 0, all writing rank-0.log. Say so instead."""
    from mpi4py import MPI

    if MPI.COMM_WORLD.size > 1:
        return
    for variables in LAUNCHER_VARS:
        launcher = _MPI_LAUNCHERS.get(variables[0])
        if launcher is None:
            continue
        rank, size = rank_from_env((variables,))
        if size > 1:
            raise InputError(
                f"launched by {launcher} as rank {rank} of {size}, but mpi4py loaded "
                f"{library_name(MPI.Get_library_version())}{_libmpi_paths()}, whose COMM_WORLD has 1 rank: run "
                "the job with that MPI's mpirun, or set MPI4PY_LIBMPI to the launcher's libmpi"
            )


def _libmpi_paths() -> str:
    """` (/path/libmpi.so.12)`: where this process's libmpi came from, if Linux says."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if re.search(r"/libmpi(_abi)?\.so[.\d]*$", line)})
    except OSError:
        return ""
    return f" ({', '.join(paths)})" if paths else ""


def private(purpose: str) -> MPI.Intracomm:
    """distvlog's own duplicate of COMM_WORLD for `purpose` (collective the first time it is asked for)."""
    comm = _private.get(purpose)
    if comm is None:
        comm = _private[purpose] = world().Dup()
        comm.Set_name(f"distvlog-{purpose}")
    return comm
