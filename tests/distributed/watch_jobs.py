"""Jobs the watch and stacks tests run on real MPI ranks (`distvlog launch -n 4 watch_jobs.py MODE GATE`):

- blocked: every rank logs, then the last rank waits in Python (a sleep loop, in `wait_in_python`) until the
  file GATE exists, while the others wait in an allreduce it has not entered (blocked in C); then all finish.
- pause: train.py's loop in small, then every rank pauses in Python (as for an evaluation or a checkpoint)
  for PAUSE_S, then trains on: no hang.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import distvlog as dv

PAUSE_S = 5.0
GATE_WAIT_S = 120.0


def wait_in_python(gate: str) -> None:
    deadline = time.monotonic() + GATE_WAIT_S
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)


def blocked(gate: str) -> None:
    comm = MPI.COMM_WORLD
    log = dv.get_logger("job")
    log.info("ready", pid=os.getpid())
    dv.flush()
    if comm.rank == comm.size - 1:
        wait_in_python(gate)
    comm.Allreduce(MPI.IN_PLACE, np.ones(4), MPI.SUM)


def pause(_gate: str) -> None:
    comm = MPI.COMM_WORLD
    log = dv.get_logger("job")
    for step in range(3):
        log.info("step", step=step)
        comm.allreduce(step)
    time.sleep(PAUSE_S)
    for step in range(3, 6):
        log.info("step", step=step)
        comm.allreduce(step)


if __name__ == "__main__":
    dv.init()
    {"blocked": blocked, "pause": pause}[sys.argv[1]](sys.argv[2] if len(sys.argv) > 2 else "")
    dv.finalize()
