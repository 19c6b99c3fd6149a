"""DDP jobs the torch tests run on real ranks (torchrun, mpirun or one plain process):

    python ddp_jobs.py MODE RESULTS_DIR

Each rank writes what it saw to RESULTS_DIR/rank-R.json; the tests read that and the rank files.
- fp16: log_ddp with the user's fp16 compression hook, two steps;
- no_sync: two optimizer steps of three micro-batches each, the first two under no_sync();
- second_hook: a model that has a comm hook already, then log_ddp on it (one process is enough).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

import distvlog.torch as dvt

KEPT: dict = {}


def model() -> DistributedDataParallel:
    torch.manual_seed(0)
    return DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)))


def batch(step: int) -> torch.Tensor:
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(100 * dist.get_rank() + step))


def fp16() -> dict:
    ddp = dvt.log_ddp(model(), hook=default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(2):
        ddp(batch(step)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return {"weight": ddp.module[0].weight.detach().flatten().tolist()}


def no_sync() -> dict:
    ddp = KEPT["model"] = dvt.log_ddp(model())  # alive at exit, when finalize() logs its last digests
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(2):
        for micro in range(3):
            if micro < 2:
                with ddp.no_sync():
                    ddp(batch(3 * step + micro)).pow(2).mean().backward()
            else:
                ddp(batch(3 * step + micro)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return {}


def second_hook() -> dict:
    ddp = model()
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    try:
        dvt.log_ddp(ddp)
    except RuntimeError as exc:
        return {"error": str(exc)}
    return {"error": None}


if __name__ == "__main__":
    mode, results = sys.argv[1], Path(sys.argv[2])
    dvt.init()
    found = {"fp16": fp16, "no_sync": no_sync, "second_hook": second_hook}[mode]()
    found["mpi_loaded"] = "mpi4py.MPI" in sys.modules
    results.mkdir(parents=True, exist_ok=True)
    (results / f"rank-{dist.get_rank()}.json").write_text(json.dumps(found))
