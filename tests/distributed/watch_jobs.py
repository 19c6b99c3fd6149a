"""Jobs the watch and stacks tests run on real MPI ranks (`distvlog launch -n 4 watch_jobs.py MODE GATE`):

- blocked: every rank logs, then the last rank waits in Python (a sleep loop, in `wait_in_python`) until the
  file GATE exists, while the others wait in an allreduce it has not entered (blocked in C); then all finish.
- pause: a DataParallel model trains 3 steps, every rank pauses in Python (as for an evaluation or a
  checkpoint) for PAUSE_S, then it trains on: no hang.
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
    dv.set_vlog_level({"parallel": 1})
    model = dv.DataParallel(dv.nn.Linear(4, 1))
    opt = dv.optim.SGD(learning_rate=0.1, parameters=model.parameters())
    for step in range(6):
        if step == 3:
            time.sleep(PAUSE_S)
        model(dv.to_tensor(np.ones((2, 4), np.float32))).sum().backward()
        opt.step()
        opt.clear_grad()


if __name__ == "__main__":
    dv.init()
    {"blocked": blocked, "pause": pause}[sys.argv[1]](sys.argv[2] if len(sys.argv) > 2 else "")
    dv.finalize()
