"""Who this process is: rank and world size from the launcher's environment, without MPI calls.

`distvlog.dist.init()` overwrites rank and world size with MPI's answer; everything else reads them here.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

# (rank variable, world-size variable) per launcher, in the order they are trusted.
LAUNCHER_VARS = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI
    ("PMI_RANK", "PMI_SIZE"),  # MPICH / Hydra, Intel MPI
    ("PMIX_RANK", "PMIX_SIZE"),  # PMIx launchers
    ("RANK", "WORLD_SIZE"),  # torchrun
    ("SLURM_PROCID", "SLURM_NTASKS"),  # srun
)


def _int_var(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"distvlog: environment variable {name}={raw!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"distvlog: environment variable {name}={raw!r} is negative")
    return value


def rank_from_env() -> tuple[int, int]:
    """(rank, world_size) from the first launcher whose variables are set, else (0, 1)."""
    for rank_var, size_var in LAUNCHER_VARS:
        rank = _int_var(rank_var)
        if rank is not None:
            size = _int_var(size_var)
            size = size if size is not None else rank + 1
            if rank >= size:
                raise ValueError(f"distvlog: {rank_var}={rank} is not below {size_var}={size}")
            return rank, size
    return 0, 1


@dataclass
class Identity:
    rank: int
    world_size: int
    host: str
    pid: int

    def refresh_pid(self) -> None:
        self.pid = os.getpid()


def _discover() -> Identity:
    rank, size = rank_from_env()
    return Identity(rank, size, socket.gethostname(), os.getpid())


IDENTITY = _discover()
