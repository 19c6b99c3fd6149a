"""Data-parallel training of the digits MLP with PyTorch DDP, logged for debugging: `launch/train.py`'s job in
torch, the example behind

    torchrun --nproc_per_node 4 launch/train_torch.py [--steps 60] [--optimizer adam|sgd] [--guard-level 5]
    distvlog launch -n 4 launch/train_torch.py    # the same under MPI, then the merged timeline
    mpirun -n 4 python launch/train_torch.py       # any MPI launcher

`distvlog.torch.init()` sets up torch.distributed (gloo) from the launcher's environment, `log_ddp` logs
every bucket's allreduce and the parameters' digests per step, and the middle layer runs inside
`backward_vlog_guard(--guard-level)`, so at level 5 its backward nodes log the gradient statistics
(`grad_stats`) that `distvlog diff` compares across ranks. `--inject-nan-rank R --inject-nan-step S` makes
that layer's backward produce NaN on rank R at step S (a square root at zero), to show how the logs find it.

Rank 0 prints the mean loss over ranks per step and, at the end, the test accuracy and the parameter
digest, checked to be bit-identical on every rank.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import digits
import numpy as np

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # ranks share the cores: one thread each, as torchrun's default

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import distvlog as dv  # noqa: E402
import distvlog.torch as dvt  # noqa: E402
from distvlog.checksum import checksum  # noqa: E402


def parse_args() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    digits.add_arguments(p)
    args = p.parse_args()
    digits.check(p, args)
    return p, args


class MLP(nn.Module):
    """64 -> hidden -> hidden -> 10; the middle layer is the part under suspicion."""

    def __init__(self, hidden: int, guard_level: int) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(64, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, 10)
        self.guard_level = guard_level

    def forward(self, x: torch.Tensor, poison: torch.Tensor | None = None) -> torch.Tensor:
        h = F.relu(self.fc1(x))
        guard = dvt.backward_vlog_guard(self.guard_level) if self.guard_level else contextlib.nullcontext()
        with guard:
            h = F.relu(self.fc2(h))
            if poison is not None:  # + 0 * sqrt(poison): forward unchanged, backward NaN where poison is 0
                h = h + 0.0 * (h - h + poison) ** 0.5
        return self.fc3(h)


def main() -> None:
    parser, args = parse_args()
    dvt.init()
    rank, world = dist.get_rank(), dist.get_world_size()
    error = digits.beyond_world(args, world)
    if error is not None:  # every rank exits with status 2, rank 0 says why, once, as argparse would
        if rank == 0:
            parser.print_usage(sys.stderr)
            print(f"{parser.prog}: error: {error}", file=sys.stderr, flush=True)
        dist.barrier()  # (before any rank's exit ends the job)
        sys.exit(2)
    log = dv.get_logger("train")

    features, labels, data_name = digits.load_data(args.seed)
    shards = digits.Shards(labels, args.seed, rank, world)
    torch.manual_seed(args.seed)  # the same initial parameters on every rank (DDP broadcasts rank 0's anyway)
    model = dvt.log_ddp(DistributedDataParallel(MLP(args.hidden, args.guard_level), bucket_cap_mb=args.bucket_mb))
    lr = args.lr or (0.01 if args.optimizer == "adam" else 0.1)
    optimizer = (torch.optim.Adam if args.optimizer == "adam" else torch.optim.SGD)(model.parameters(), lr=lr)
    if rank == 0:
        print(
            f"training on {data_name}: {len(shards.train)} examples in {world} shards, {len(shards.test)} for testing; "
            f"{args.optimizer} lr={lr}, torch {torch.__version__} DDP ({dist.get_backend()})",
            flush=True,
        )
    for step in range(args.steps):
        started = time.perf_counter()
        batch = shards.batch(args.batch_size)
        poison = digits.poison(args, rank, step)
        logits = model(torch.from_numpy(features[batch]), None if poison is None else torch.tensor(poison))
        loss = F.cross_entropy(logits, torch.from_numpy(labels[batch]))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        log.info("train step", loss=loss.item(), mean_loss=mean_loss.item() / world)
        if rank == 0:
            print(
                f"step {step:3d}  loss {mean_loss.item() / world:.4f}  "
                f"({(time.perf_counter() - started) * 1e3:.0f} ms)",
                flush=True,
            )

    digest = checksum(np.concatenate([p.detach().numpy().ravel() for p in model.parameters()]))
    digests = [None] * world
    dist.all_gather_object(digests, digest)
    with torch.no_grad():
        predicted = model.module(torch.from_numpy(features[shards.test])).argmax(1).numpy()
    if rank == 0:
        print(f"test accuracy {np.mean(predicted == labels[shards.test]):.3f}", flush=True)
        if len(set(digests)) == 1:
            print(f"parameters bit-identical on all {world} ranks: digest {digest}", flush=True)
        else:
            print(f"parameters differ across ranks: {digests}", flush=True)
    dvt.finalize()


if __name__ == "__main__":
    main()
