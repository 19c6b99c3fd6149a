"""What the two digits examples share, `train.py` (our engine on MPI) and `train_torch.py` (PyTorch DDP): the
flags they both take, their checks, the data and each rank's shard. No MPI and no torch here: under torchrun
nothing may initialise MPI.
"""

from __future__ import annotations

import argparse

import numpy as np

DEFAULT_NAN_STEP = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of both examples."""
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument("--lr", type=float, help="learning rate (default: 0.01 for adam, 0.1 for sgd)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument(
        "--guard-level", type=int, default=5, help="backward_vlog_guard level of the middle layer (0: no guard)"
    )
    p.add_argument("--inject-nan-rank", type=int, help="rank whose backward produces NaN ...")
    p.add_argument("--inject-nan-step", type=int, help=f"... at this step (default: {DEFAULT_NAN_STEP})")
    p.add_argument("--bucket-mb", type=float, default=0.02, help="allreduce bucket size (MB)")
    p.add_argument("--seed", type=int, default=0)


def check(p: argparse.ArgumentParser, args: argparse.Namespace, at_least: tuple[tuple[str, int], ...] = ()) -> None:
    """Refuse what would be ignored silently or fail deep inside, as argparse refuses (usage, the reason,
    status 2); `at_least` adds a script's own (flag, least value). The default --inject-nan-step is set
    here: given without --inject-nan-rank, it would do nothing."""
    for name, least in (
        ("steps", 1),
        ("batch_size", 1),
        ("hidden", 1),
        ("guard_level", 0),
        ("inject_nan_rank", 0),
        ("inject_nan_step", 0),
        *at_least,
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
        args.inject_nan_step, given = DEFAULT_NAN_STEP, f"--inject-nan-step {DEFAULT_NAN_STEP} (the default)"
    if args.inject_nan_step >= args.steps:
        p.error(f"{given}: beyond the last step, {args.steps - 1} (--steps {args.steps})")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def beyond_world(args: argparse.Namespace, world: int) -> str | None:
    """What needs the world size to be refused, as an error text; None when the flags fit `world` ranks."""
    if args.inject_nan_rank is not None and args.inject_nan_rank >= world:
        return f"--inject-nan-rank {args.inject_nan_rank}: beyond the last rank, {world - 1} ({world} ranks)"
    return None


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


class Shards:
    """The split every rank agrees on: a test set, and this rank's share of the training set, from which
    it draws its batches with a generator of its own."""

    def __init__(self, labels: np.ndarray, seed: int, rank: int, world: int) -> None:
        order = np.random.default_rng(seed).permutation(len(labels))
        self.test, self.train = order[: len(order) // 5], order[len(order) // 5 :]
        self.shard = self.train[rank::world]
        self._rng = np.random.default_rng(seed + 1 + rank)

    def batch(self, size: int) -> np.ndarray:
        return self._rng.choice(self.shard, min(size, len(self.shard)), replace=False)


def poison(args: argparse.Namespace, rank: int, step: int) -> float | None:
    """The middle layer's poison at `step`: 0.0 where this rank plants the NaN, 1.0 at other steps and ranks
    (the same graph everywhere), None when no rank plants one."""
    if args.inject_nan_rank is None:
        return None
    return 0.0 if rank == args.inject_nan_rank and step == args.inject_nan_step else 1.0
