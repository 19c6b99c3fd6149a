"""Data-parallel training of an MLP classifier, logged for debugging: the example behind

    distvlog launch -n 4 launch/train.py [--steps 60] [--optimizer adam|sgd] [--guard-level 5]
    mpirun -n 4 python launch/train.py            # the same, with any MPI launcher

Data: scikit-learn's bundled digits (8x8 images, 10 classes) when scikit-learn is installed, else a
seeded synthetic set of the same shape. Every rank trains on its own shard; DataParallel averages the
gradients. The middle layer runs inside `backward_vlog_guard(--guard-level)`, so at level 5 its backward
nodes log gradient statistics (`grad_stats`) that `distvlog diff` compares across ranks.
`--inject-nan-rank R --inject-nan-step S` makes that layer's backward produce NaN on rank R at step S
(a square root at zero, whose derivative is infinite), to show how the logs find it.

Rank 0 prints the mean loss over ranks per step and, at the end, the test accuracy and the parameter
digest, which DataParallel has checked to be bit-identical on every rank.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

import numpy as np
from mpi4py import MPI

import distvlog as dv
import distvlog.nn.functional as F


def parse_args() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument("--lr", type=float, help="learning rate (default: 0.01 for adam, 0.1 for sgd)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument(
        "--guard-level", type=int, default=5, help="backward_vlog_guard level of the middle layer (0: no guard)"
    )
    p.add_argument("--inject-nan-rank", type=int, help="rank whose backward produces NaN ...")
    p.add_argument("--inject-nan-step", type=int, help="... at this step (default: 3)")
    p.add_argument("--bucket-mb", type=float, default=0.02, help="allreduce bucket size (MB)")
    p.add_argument("--overlap", action="store_true", help="start allreduces during backward")
    p.add_argument("--debug", action="store_true", help="DataParallel debug checks (also DISTVLOG_DP_DEBUG=1)")
    p.add_argument("--dist-v", type=int, default=1, help="verbosity of DataParallel's own records")
    p.add_argument(
        "--gather",
        action="store_true",
        help="at the end, copy every rank's log into rank 0's run directory (node-local log dirs)",
    )
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    _check(p, args)
    return p, args


def _check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what would be ignored silently or fail deep inside, as argparse refuses (usage, the reason,
    status 2). The default --inject-nan-step is set here: given without --inject-nan-rank, it would do nothing."""
    for name, least in (
        ("steps", 1),
        ("batch_size", 1),
        ("hidden", 1),
        ("guard_level", 0),
        ("dist_v", 0),
        ("inject_nan_rank", 0),
        ("inject_nan_step", 0),
    ):
        value = getattr(args, name)
        if value is not None and value < least:
            p.error(f"{_flag(name)} {value}: must be at least {least}")
    for name in ("lr", "bucket_mb"):
        value = getattr(args, name)
        if value is not None and not value > 0:  # (NaN too)
            p.error(f"{_flag(name)} {value}: must be positive")
    if args.inject_nan_rank is None:
        if args.inject_nan_step is not None:
            p.error(f"--inject-nan-step {args.inject_nan_step}: needs --inject-nan-rank")
        return
    given = f"--inject-nan-step {args.inject_nan_step}"
    if args.inject_nan_step is None:
        args.inject_nan_step, given = 3, "--inject-nan-step 3 (the default)"
    if args.inject_nan_step >= args.steps:
        p.error(f"{given}: beyond the last step, {args.steps - 1} (--steps {args.steps})")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_against_world(p: argparse.ArgumentParser, args: argparse.Namespace, rank: int, world: int) -> None:
    """What needs the world size, checked on every rank after init: every rank exits with status 2, rank 0
    says why (once), as argparse would; the barrier keeps any rank's exit, which aborts the job under
    `distvlog launch`, from killing rank 0 before it has said so."""
    if args.inject_nan_rank is None or args.inject_nan_rank < world:
        return
    if rank == 0:
        p.print_usage(sys.stderr)
        print(
            f"{p.prog}: error: --inject-nan-rank {args.inject_nan_rank}: beyond the last rank, {world - 1} "
            f"({world} ranks)",
            file=sys.stderr,
            flush=True,
        )
    MPI.COMM_WORLD.Barrier()
    sys.exit(2)


def load_data(seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(features, labels, name): digits if scikit-learn has them, else a look-alike from a seeded RNG."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        rng = np.random.default_rng(seed)
        centers = rng.normal(0.0, 1.0, (10, 64))
        labels = rng.integers(0, 10, 1797)
        features = centers[labels] + rng.normal(0.0, 2.5, (1797, 64))
        name = "synthetic digits-like data (scikit-learn not installed)"
    else:
        digits = load_digits()
        features, labels, name = digits.data, digits.target, "scikit-learn digits"
    features = (features - features.mean(0)) / (features.std(0) + 1e-6)
    return features.astype("float32"), labels.astype("int64"), name


class MLP(dv.nn.Layer):
    """64 -> hidden -> hidden -> 10; the middle layer is the part under suspicion."""

    def __init__(self, hidden: int, guard_level: int) -> None:
        super().__init__()
        self.fc1 = dv.nn.Linear(64, hidden)
        self.fc2 = dv.nn.Linear(hidden, hidden)
        self.fc3 = dv.nn.Linear(hidden, 10)
        self.guard_level = guard_level

    def forward(self, x: dv.Tensor, poison: dv.Tensor | None = None) -> dv.Tensor:
        h = F.relu(self.fc1(x))
        guard = dv.backward_vlog_guard(self.guard_level) if self.guard_level else contextlib.nullcontext()
        with guard:
            h = F.relu(self.fc2(h))
            if poison is not None:  # + 0 * sqrt(poison): forward unchanged, backward NaN where poison is 0
                h = h + 0.0 * (h - h + poison) ** 0.5
        return self.fc3(h)


def main() -> None:
    parser, args = parse_args()
    dv.init()
    rank, world = dv.get_rank(), dv.get_world_size()
    check_against_world(parser, args, rank, world)
    dv.set_vlog_level({"parallel": args.dist_v})
    log = dv.get_logger("train")

    features, labels, data_name = load_data(args.seed)
    order = np.random.default_rng(args.seed).permutation(len(labels))
    test, train = order[: len(order) // 5], order[len(order) // 5 :]
    shard = train[rank::world]  # this rank's share of the training set

    dv.seed(args.seed)
    model = dv.DataParallel(
        MLP(args.hidden, args.guard_level),
        comm_buffer_size=args.bucket_mb,
        overlap=args.overlap,
        debug=args.debug or None,
    )
    lr = args.lr or (0.01 if args.optimizer == "adam" else 0.1)
    optimizer = (dv.optim.Adam if args.optimizer == "adam" else dv.optim.SGD)(
        learning_rate=lr, parameters=model.parameters()
    )
    if rank == 0:
        print(
            f"training on {data_name}: {len(train)} examples in {world} shards, {len(test)} for testing; "
            f"{args.optimizer} lr={lr}, {len(model.buckets)} allreduce buckets",
            flush=True,
        )
    rng = np.random.default_rng(args.seed + 1 + rank)
    for step in range(args.steps):
        started = time.perf_counter()
        batch = rng.choice(shard, min(args.batch_size, len(shard)), replace=False)
        poison = None
        if args.inject_nan_rank is not None:
            bad = rank == args.inject_nan_rank and step == args.inject_nan_step
            poison = dv.to_tensor(np.float32(0.0 if bad else 1.0))
        logits = model(dv.to_tensor(features[batch]), poison)
        loss = F.cross_entropy(logits, dv.to_tensor(labels[batch]))
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        mean_loss = MPI.COMM_WORLD.allreduce(float(loss.item()), op=MPI.SUM) / world
        log.info("train step", loss=float(loss.item()), mean_loss=mean_loss)
        if rank == 0:
            print(f"step {step:3d}  loss {mean_loss:.4f}  ({(time.perf_counter() - started) * 1e3:.0f} ms)", flush=True)

    digest = model.check_parameters()
    with dv.no_grad():
        predicted = model(dv.to_tensor(features[test])).numpy().argmax(1)
    if rank == 0:
        print(f"test accuracy {np.mean(predicted == labels[test]):.3f}", flush=True)
        print(f"parameters bit-identical on all {world} ranks: digest {digest}", flush=True)
    dv.finalize(gather=args.gather)


if __name__ == "__main__":
    main()
