"""Data-parallel training of an MLP classifier, logged for debugging: the example behind

    distvlog launch -n 4 launch/train.py [--steps 60] [--optimizer adam|sgd] [--guard-level 5]
    mpirun -n 4 python launch/train.py            # the same, with any MPI launcher

Data (`--data`): scikit-learn's bundled digits (8x8 images, 10 classes), or a seeded synthetic set of the
same shape; by default the digits when scikit-learn is installed. Every rank trains on its own shard;
DataParallel averages the gradients and logs per-step parameter digests, per-bucket checksums, norms and
wait times (`--dist-v 1`, the default). The middle layer runs inside `backward_vlog_guard(--guard-level)`,
so at level 5 its backward nodes log gradient statistics (`grad_stats`) that `distvlog diff` compares
across ranks.

`--inject-NAME-rank R [--inject-NAME-step S]` plants a fault on rank R (see `faults.py` and --help): NaN
(a square root at zero in the middle layer's backward), gradient explosion, a bit flip or a scaled bucket
after the allreduce, another learning rate or weight decay, a skipped broadcast, another backward graph, an
allreduce more or fewer, a straggler; `distvlog diff` names the rank, step and place.
`--inject-numerics-step S` acts on every rank alike: from step S each feeds its batch reversed, the same
sums in another order, as a new kernel would; `distvlog diff RUN_A RUN_B` finds where that run departs
from one without it (docs/run-vs-run.md, which also says what makes this training deterministic).

Rank 0 prints the mean loss over ranks per step and, at the end, the test accuracy and the parameter
digest, which DataParallel has checked to be bit-identical on every rank.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import digits
import faults
import numpy as np
from mpi4py import MPI

import distvlog as dv
import distvlog.nn.functional as F


def parse_args() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    p = digits.parser(__doc__)
    digits.add_arguments(p)
    p.add_argument("--overlap", action="store_true", help="start allreduces during backward")
    p.add_argument("--debug", action="store_true", help="DataParallel debug checks (also DISTVLOG_DP_DEBUG=1)")
    p.add_argument("--dist-v", type=int, default=1, help="verbosity of DataParallel's own records (default 1)")
    p.add_argument(
        "--gather",
        action="store_true",
        help="at the end, copy every rank's log into rank 0's run directory (node-local log dirs)",
    )
    faults.add_arguments(p)
    args = p.parse_args()
    digits.check(p, args, at_least=(("dist_v", 0),))
    return p, args


class MLP(dv.nn.Layer):
    """64 -> hidden -> hidden -> 10; the middle layer is the part under suspicion."""

    def __init__(self, hidden: int, guard_level: int) -> None:
        super().__init__()
        self.fc1 = dv.nn.Linear(64, hidden)
        self.fc2 = dv.nn.Linear(hidden, hidden)
        self.fc3 = dv.nn.Linear(hidden, 10)
        self.guard_level = guard_level

    def forward(
        self, x: dv.Tensor, poison: dv.Tensor | None = None, boost: dv.Tensor | None = None, other_graph: bool = False
    ) -> dv.Tensor:
        """`poison` and `boost` plant faults with the same graph on every rank (only their values differ);
        `other_graph` changes the graph."""
        h = F.relu(self.fc1(x))
        guard = dv.backward_vlog_guard(self.guard_level) if self.guard_level else contextlib.nullcontext()
        with guard:
            h = self.fc2(h)
            h = dv.tanh(h) if other_graph else F.relu(h)
            if poison is not None:  # + 0 * sqrt(poison): forward unchanged, backward NaN where poison is 0
                h = h + 0.0 * (h - h + poison) ** 0.5
            if boost is not None:  # + (boost - 1) * (h - h'): forward unchanged, backward x boost
                h = h + (boost - 1.0) * (h - h.detach())
        return self.fc3(h)


def main() -> None:
    parser, args = parse_args()
    dv.init()
    rank, world = dv.get_rank(), dv.get_world_size()
    digits.refuse_beyond_world(parser, args, rank, world, MPI.COMM_WORLD.Barrier)
    plan = faults.Plan(args, rank)
    dv.set_vlog_level({"parallel": args.dist_v})
    log = dv.get_logger("train")

    features, labels, data_name = digits.load_data(args.data, args.seed)
    shards = digits.Shards(labels, args.seed, rank, world)

    dv.seed(args.seed)
    model = dv.DataParallel(
        MLP(args.hidden, args.guard_level),
        comm_buffer_size=args.bucket_mb,
        overlap=args.overlap,
        debug=args.debug or None,
    )
    if plan.now("no-broadcast"):  # parameters of its own, as if the broadcast had not reached it
        dv.seed(args.seed + 1 + rank)
        for mine, own in zip(model.parameters(), MLP(args.hidden, args.guard_level).parameters()):
            mine.numpy()[...] = own.numpy()
    lr = (args.lr or (0.01 if args.optimizer == "adam" else 0.1)) * (2 if plan.now("lr") else 1)
    optimizer = (dv.optim.Adam if args.optimizer == "adam" else dv.optim.SGD)(
        learning_rate=lr, parameters=model.parameters(), weight_decay=0.01 if plan.now("weight-decay") else None
    )
    if rank == 0:
        print(
            f"training on {data_name}: {len(shards.train)} examples in {world} shards, {len(shards.test)} for testing; "
            f"{args.optimizer} lr={lr}, {len(model.buckets)} allreduce buckets",
            flush=True,
        )
    for step in range(args.steps):
        started = time.perf_counter()
        batch = shards.batch(args.batch_size)
        if plan.other_numerics(step):  # the same examples, reversed: every sum over the batch in another order
            batch = batch[::-1]
        poison = boost = None  # on every rank when some rank plants the fault: the same graph everywhere
        if plan.anywhere("nan"):
            poison = dv.to_tensor(np.float32(0.0 if plan.now("nan", step) else 1.0))
        if plan.anywhere("explode"):
            boost = dv.to_tensor(np.float32(faults.EXPLOSION if plan.now("explode", step) else 1.0))
        logits = model(dv.to_tensor(features[batch]), poison, boost, other_graph=plan.now("graph", step))
        loss = F.cross_entropy(logits, dv.to_tensor(labels[batch]))
        if plan.now("slow"):
            time.sleep(plan.slow_s)
        if plan.now("skip-allreduce", step):
            with model.no_sync():
                loss.backward()
        else:
            loss.backward(retain_graph=plan.now("extra-allreduce", step))
            if plan.now("extra-allreduce", step):
                loss.backward()
        if plan.now("scale", step):
            for param in model.buckets[0].params:
                param.grad = dv.to_tensor(param.grad.numpy() * 2)
        optimizer.step()
        optimizer.clear_grad()
        if plan.now("bitflip", step):
            weight = model.fc2.weight.numpy()
            weight.view(np.uint32).flat[0] ^= faults.FLIPPED_BIT
        mean_loss = MPI.COMM_WORLD.allreduce(float(loss.item()), op=MPI.SUM) / world
        log.info("train step", loss=float(loss.item()), mean_loss=mean_loss)
        if rank == 0:
            print(f"step {step:3d}  loss {mean_loss:.4f}  ({(time.perf_counter() - started) * 1e3:.0f} ms)", flush=True)

    digest = model.check_parameters()
    with dv.no_grad():
        predicted = model(dv.to_tensor(features[shards.test])).numpy().argmax(1)
    if rank == 0:
        print(f"test accuracy {np.mean(predicted == labels[shards.test]):.3f}", flush=True)
        print(f"parameters bit-identical on all {world} ranks: digest {digest}", flush=True)
    dv.finalize(gather=args.gather)


if __name__ == "__main__":
    main()
