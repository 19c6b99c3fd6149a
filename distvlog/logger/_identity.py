"""Who this process is: rank and world size from the launcher's environment, without MPI calls.

`distvlog.distributed.init()` overwrites rank and world size with MPI's answer; everything else reads them here.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from . import _env


def rank_from_env(launchers: tuple[tuple[str, str], ...] = _env.LAUNCHER_VARS) -> tuple[int, int]:
    """(rank, world_size) from the first launcher whose rank variable is set, else (0, 1). A launcher with a
    bad value is skipped with a warning (a mistyped variable must not stop the job): the next one is tried."""
    for i, (rank_var, size_var) in enumerate(launchers):
        raw_rank, raw_size = os.environ.get(rank_var), os.environ.get(size_var)
        if not raw_rank:
            continue
        try:
            bad = rank_var, raw_rank
            rank = _env.count(raw_rank)
            bad = size_var, raw_size
            size = _env.count(raw_size) if raw_size else rank + 1
            bad = rank_var, raw_rank
            if rank >= size:
                raise ValueError(f"not below {size_var}={size}")
            return rank, size
        except ValueError as exc:
            rank, size = rank_from_env(launchers[i + 1 :])
            _env.warn(*bad, str(exc), f"rank {rank} of {size}", own=bad[0] == rank_var)
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
