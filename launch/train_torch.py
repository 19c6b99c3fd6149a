"""Data-parallel training of the digits MLP with PyTorch DDP, logged for debugging: `launch/train.py`'s job in
torch, the example behind

    torchrun --nproc_per_node 4 launch/train_torch.py [--steps 60] [--optimizer adam|sgd] [--guard-level 5]
    distvlog launch -n 4 launch/train_torch.py    # the same under MPI, then the merged timeline
    mpirun -n 4 python launch/train_torch.py       # any MPI launcher

`distvlog.torch.init()` sets up torch.distributed (gloo) from the launcher's environment, `log_ddp` logs
every bucket's allreduce and the parameters' digests per step, and the middle layer runs inside
`backward_vlog_guard(--guard-level)`, so at level 5 its backward nodes log the gradient statistics
(`grad_stats`) that `distvlog diff` compares across ranks.

`--fr-dump DIR` turns PyTorch's Flight Recorder on and dumps it per rank when the job fails (`flight.py`):
`distvlog diff DIR` then names the rank the others wait for.

`--inject-NAME-rank R [--inject-NAME-step S]` plants one of `faults.py`'s faults on rank R, as in
`train.py`: NaN (a square root at zero in the middle layer's backward), gradient explosion, a bit flip, the
last layer's averaged gradients doubled, another learning rate or weight decay, a skipped broadcast, another
backward graph, a straggler. The two that change the number of allreduces are `train.py`'s only (DDP refuses
a second backward without a forward).

Rank 0 prints the mean loss over ranks per step and, at the end, the test accuracy and the parameter
digest, checked to be bit-identical on every rank.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import digits
import faults
import flight
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

NOT_HERE = ("extra-allreduce", "skip-allreduce")  # faults only train.py plants


def parse_args() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    p = digits.parser(__doc__)
    digits.add_arguments(p)
    faults.add_arguments(p)
    flight.add_arguments(p)
    args = p.parse_args()
    digits.check(p, args)
    for name in NOT_HERE:
        if getattr(args, f"inject_{name.replace('-', '_')}_rank") is not None:
            p.error(f"--inject-{name}-rank: planted by launch/train.py only (DDP cannot run a backward more or less)")
    return p, args


class MLP(nn.Module):
    """64 -> hidden -> hidden -> 10; the middle layer is the part under suspicion."""

    def __init__(self, hidden: int, guard_level: int) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(64, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, 10)
        self.guard_level = guard_level

    def forward(
        self,
        x: torch.Tensor,
        poison: torch.Tensor | None = None,
        boost: torch.Tensor | None = None,
        other_graph: bool = False,
    ) -> torch.Tensor:
        """`poison` and `boost` plant faults with the same graph on every rank (only their values differ);
        `other_graph` changes the graph."""
        h = F.relu(self.fc1(x))
        guard = dvt.backward_vlog_guard(self.guard_level) if self.guard_level else contextlib.nullcontext()
        with guard:
            h = self.fc2(h)
            h = torch.tanh(h) if other_graph else F.relu(h)
            if poison is not None:  # + 0 * sqrt(poison): forward unchanged, backward NaN where poison is 0
                h = h + 0.0 * (h - h + poison) ** 0.5
            if boost is not None:  # + (boost - 1) * (h - h'): forward unchanged, backward x boost
                h = h + (boost - 1.0) * (h - h.detach())
        return self.fc3(h)


def main() -> None:
    parser, args = parse_args()
    dvt.init(timeout=flight.enable(args))
    flight.dump_on_failure(args)
    rank, world = dist.get_rank(), dist.get_world_size()
    digits.refuse_beyond_world(parser, args, rank, world, dist.barrier)
    plan = faults.Plan(args, rank)
    log = dv.get_logger("train")

    features, labels, data_name = digits.load_data(args.data, args.seed)
    shards = digits.Shards(labels, args.seed, rank, world)
    torch.manual_seed(args.seed)  # the same initial parameters on every rank (DDP broadcasts rank 0's anyway)
    model = dvt.log_ddp(DistributedDataParallel(MLP(args.hidden, args.guard_level), bucket_cap_mb=args.bucket_mb))
    if plan.now("no-broadcast"):  # parameters of its own, as if DDP's broadcast had not reached it
        torch.manual_seed(args.seed + 1 + rank)
        with torch.no_grad():
            for mine, own in zip(model.module.parameters(), MLP(args.hidden, 0).parameters()):
                mine.copy_(own)
    lr = (args.lr or (0.01 if args.optimizer == "adam" else 0.1)) * (2 if plan.now("lr") else 1)
    optimizer = (torch.optim.Adam if args.optimizer == "adam" else torch.optim.SGD)(
        model.parameters(), lr=lr, weight_decay=0.01 if plan.now("weight-decay") else 0.0
    )
    if rank == 0:
        print(
            f"training on {data_name}: {len(shards.train)} examples in {world} shards, {len(shards.test)} for testing; "
            f"{args.optimizer} lr={lr}, torch {torch.__version__} DDP ({dist.get_backend()})",
            flush=True,
        )
    for step in range(args.steps):
        started = time.perf_counter()
        batch = shards.batch(args.batch_size)
        if plan.other_numerics(step):  # the same examples, reversed: every sum over the batch in another order
            batch = batch[::-1]
        poison = boost = None  # on every rank when some rank plants the fault: the same graph everywhere
        if plan.anywhere("nan"):
            poison = torch.tensor(0.0 if plan.now("nan", step) else 1.0)
        if plan.anywhere("explode"):
            boost = torch.tensor(faults.EXPLOSION if plan.now("explode", step) else 1.0)
        logits = model(torch.from_numpy(features[batch]), poison, boost, other_graph=plan.now("graph", step))
        loss = F.cross_entropy(logits, torch.from_numpy(labels[batch]))
        if plan.now("slow"):
            time.sleep(plan.slow_s)
        loss.backward()
        if plan.now("scale", step):  # the last layer's gradients are in DDP's first bucket (it fills from the end)
            for param in model.module.fc3.parameters():
                param.grad.mul_(2)
        optimizer.step()
        optimizer.zero_grad()
        if plan.now("bitflip", step):
            with torch.no_grad():
                model.module.fc2.weight.view(-1)[:1].view(torch.int32).bitwise_xor_(faults.FLIPPED_BIT)
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
