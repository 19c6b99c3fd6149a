"""One torchrun job (gloo on CPU) whose ranks leave real Flight Recorder dumps for several planted faults:

    TORCH_FR_BUFFER_SIZE=64 torchrun --nproc_per_node 4 [--log-dir D --redirects 3] fr_jobs.py OUT FAULT...

Each worker forks one process per FAULT (torch imported once: start-up is the slow part here); those
processes form a gloo job of their own (a FileStore under OUT/FAULT), run a few collectives with the fault
planted, and dump their Flight Recorder as torch names it by default, pickle and JSON:
`OUT/FAULT/nccl_trace_rank_<R>` and `OUT/FAULT-json/nccl_trace_rank_<R>` — after the collectives, or when
one failed (gloo's timeout is 5 s here); the healthy one is profiled too (OUT/kineto/trace_<pid>.json). The
worker prints what each did and logs it with distvlog; then
rank 1 raises under torchrun's @record (its error.json). Faults:
- healthy: three all_reduces, a broadcast and a barrier on every rank;
- skip: rank 2 skips the second all_reduce (the others wait for it at the third);
- late: rank 3 sleeps past the others' timeout before the second all_reduce;
- extra: rank 1 runs one all_reduce more at the end;
- order: two process groups, rank 0 uses them in the other order (each side waits in its own group).
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json
from torch.distributed.elastic.multiprocessing.errors import record

import distvlog as dv

TIMEOUT_S = 5


def collectives(fault: str, rank: int) -> None:
    x = torch.ones(8)
    if fault == "order":
        timeout = timedelta(seconds=TIMEOUT_S)
        a, b = dist.new_group(backend="gloo", timeout=timeout), dist.new_group(backend="gloo", timeout=timeout)
        first, second = (a, b) if rank == 0 else (b, a)
        dist.all_reduce(x, group=first)  # line: order
        dist.all_reduce(x, group=second)
        return
    dist.all_reduce(x)
    if fault == "late" and rank == 3:
        time.sleep(TIMEOUT_S + 3)
    if not (fault == "skip" and rank == 2):
        dist.all_reduce(x)  # line: second
    dist.all_reduce(x)  # line: third
    if fault == "healthy":
        dist.broadcast(torch.zeros(4, dtype=torch.int64), src=0)
        dist.barrier()  # line: barrier
    if fault == "extra" and rank == 1:
        dist.all_reduce(x)  # line: extra


def scenario(out: Path, fault: str, rank: int, world: int) -> None:
    """One fault's job, in a forked process: never returns."""
    timeout = timedelta(seconds=60 if fault == "healthy" else TIMEOUT_S)
    store = f"file://{out / fault}.store"
    status = "done"
    try:
        dist.init_process_group("gloo", init_method=store, rank=rank, world_size=world, timeout=timeout)
        if fault == "healthy":  # profiled too: the profiler's Chrome trace, named by pid (its rank is inside)
            with torch.profiler.profile() as profile:
                collectives(fault, rank)
            (out / "kineto").mkdir(parents=True, exist_ok=True)
            profile.export_chrome_trace(str(out / "kineto" / f"trace_{os.getpid()}.json"))
        else:
            collectives(fault, rank)
    except RuntimeError as exc:
        status = f"failed: {str(exc).splitlines()[0][:200]}"
    for form, data in (("", _dump_fr_trace(True, True, False)), ("-json", _dump_fr_trace_json(True, False))):
        (out / f"{fault}{form}").mkdir(parents=True, exist_ok=True)
        (out / f"{fault}{form}" / f"nccl_trace_rank_{rank}").write_bytes(data)
    print(f"{fault}: {status}", flush=True)
    os._exit(0)  # a failed gloo group cannot be torn down: leave at once


def wait_for_all(out: Path, rank: int, world: int) -> None:
    (out / f"finished-{rank}").touch()
    while sum((out / f"finished-{r}").exists() for r in range(world)) < world:
        time.sleep(0.1)


@record
def main() -> None:
    out, faults = Path(sys.argv[1]), sys.argv[2:]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    log = dv.get_logger("fr_jobs")
    out.mkdir(parents=True, exist_ok=True)
    children = {}
    for fault in faults:
        log.info("scenario begins", fault=fault)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            scenario(out, fault, rank, world)
        children[pid] = fault
    for pid, fault in children.items():
        os.waitpid(pid, 0)
        log.info("scenario ends", fault=fault)
    wait_for_all(out, rank, world)
    if rank == 1:
        raise RuntimeError("rank 1 gives up: a collective timed out")


if __name__ == "__main__":
    main()
