"""PyTorch's Flight Recorder for `train_torch.py`: on, and dumped when the job fails, for `distvlog diff`.

    torchrun --nproc_per_node 4 launch/train_torch.py --fr-dump dumps --timeout-s 10
    distvlog diff dumps

`--fr-dump DIR` turns the Flight Recorder on (TORCH_FR_BUFFER_SIZE, 2,000 entries, unless set) and dumps
each rank's to DIR/nccl_trace_rank_<R> (pickle, with Python stacks) when the rank fails: an exception out
of the script (a collective's timeout is one) or SIGTERM, which torchrun sends every other rank once one
has failed — a rank stuck in a hang dumps too, so the dumps show where each rank was. `--timeout-s` sets
the process group's collective timeout (torch's default is 30 minutes).
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
from pathlib import Path

import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fr-dump", metavar="DIR", help="Flight Recorder on; each rank dumps it to DIR when it fails")
    p.add_argument("--timeout-s", type=float, metavar="S", help="collective timeout (default: torch's, 30 min)")


def enable(args: argparse.Namespace) -> datetime.timedelta | None:
    """Before the process group exists: the Flight Recorder on if asked; the timeout to create it with."""
    if args.fr_dump:
        os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    return datetime.timedelta(seconds=args.timeout_s) if args.timeout_s else None


def dump_on_failure(args: argparse.Namespace) -> None:
    """After the process group exists: dump when an exception leaves the script or SIGTERM arrives."""
    if not args.fr_dump:
        return
    path = Path(args.fr_dump) / f"nccl_trace_rank_{dist.get_rank()}"

    def dump() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_dump_fr_trace(True, True, False))
        sys.stderr.write(f"rank {dist.get_rank()}: Flight Recorder dumped to {path}\n")  # (one write: ranks share it)
        sys.stderr.flush()

    previous_hook = sys.excepthook

    def on_exception(*exc_info) -> None:
        dump()
        previous_hook(*exc_info)

    def on_sigterm(signum: int, frame) -> None:
        dump()
        sys.exit(128 + signum)

    sys.excepthook = on_exception
    signal.signal(signal.SIGTERM, on_sigterm)
