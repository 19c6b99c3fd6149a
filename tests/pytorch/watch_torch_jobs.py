"""DDP jobs (gloo, CPU) the watch tests run under torchrun: `python watch_torch_jobs.py MODE`.

- skip: rank 1 runs step FAULT_STEP's backward under no_sync(): one allreduce of every bucket fewer than the
  others. gloo pairs the collectives in order, so its next step's allreduces meet the others' of this step
  (its parameters part from theirs), and the others wait for one more at the end that never comes.
- nan: rank 1's loss is NaN at step FAULT_STEP, in the guarded model's backward.
"""

from __future__ import annotations

import contextlib
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import distvlog.torch as dvt

STEPS, FAULT_STEP = 8, 3


def _train(fault: str) -> None:
    torch.manual_seed(0)
    ddp = dvt.log_ddp(DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(STEPS):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(100 * dist.get_rank() + step))
        planted = dist.get_rank() == 1 and step == FAULT_STEP
        with ddp.no_sync() if planted and fault == "skip" else contextlib.nullcontext():  # (read by the forward)
            with dvt.backward_vlog_guard(5):
                loss = ddp(x).pow(2).mean() * (float("nan") if planted and fault == "nan" else 1.0)
            loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    dvt.init()
    _train(sys.argv[1])
    dvt.finalize()
