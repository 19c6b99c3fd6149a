"""What the two digits examples share, `train.py` (our engine on MPI) and `train_torch.py` (PyTorch DDP): the
flags they both take (the fault flags are `faults.py`'s), their checks, the data and each rank's shard. No MPI
and no torch here: under torchrun nothing may initialise MPI.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import faults
import numpy as np


def parser(doc: str) -> argparse.ArgumentParser:
    """A script's parser whose --help shows the whole of its docstring, as written."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of both examples (a script adds its own, then the fault flags)."""
    p.add_argument("--steps", type=int, default=60, help="training steps (default 60)")
    p.add_argument("--batch-size", type=int, default=32, help="examples per rank and step (default 32)")
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam", help="(default adam)")
    p.add_argument(
        "--data",
        choices=("auto", "digits", "synthetic"),
        default="auto",
        help="scikit-learn's digits, or seeded synthetic data like them (default auto: digits when installed)",
    )
    p.add_argument("--lr", type=float, help="learning rate (default: 0.01 for adam, 0.1 for sgd)")
    p.add_argument("--hidden", type=int, default=64, help="width of the two hidden layers (default 64)")
    p.add_argument(
        "--guard-level",
        type=int,
        default=5,
        help="backward_vlog_guard level of the middle layer (default 5; 0: no guard)",
    )
    p.add_argument("--bucket-mb", type=float, default=0.02, help="allreduce bucket size in MB (default 0.02)")
    p.add_argument("--seed", type=int, default=0, help="data, initial parameters and batches (default 0)")


def check(p: argparse.ArgumentParser, args: argparse.Namespace, at_least: tuple[tuple[str, int], ...] = ()) -> None:
    """Refuse what would be ignored silently or fail deep inside, as argparse refuses (usage, the reason,
    status 2); `at_least` adds a script's own (flag, least value). Then the fault flags (`faults.check`)."""
    for name, least in (("steps", 1), ("batch_size", 1), ("hidden", 1), ("guard_level", 0), *at_least):
        value = getattr(args, name)
        if value is not None and value < least:
            p.error(f"{_flag(name)} {value}: must be at least {least}")
    for name in ("lr", "bucket_mb"):
        value = getattr(args, name)
        if value is not None and not value > 0:  # (NaN too)
            p.error(f"{_flag(name)} {value}: must be positive")
    if args.data == "digits" and _load_digits() is None:
        p.error("--data digits: needs scikit-learn (pip install scikit-learn), or use --data synthetic")
    faults.check(p, args)


def refuse_beyond_world(
    p: argparse.ArgumentParser, args: argparse.Namespace, rank: int, world: int, barrier: Callable[[], None]
) -> None:
    """What needs the world size, checked on every rank after init: a fault rank beyond the world makes every
    rank exit with status 2, rank 0 saying why, once, as argparse would. `barrier` (MPI's or torch's) comes
    first: under `distvlog launch` one rank's exit ends the job, which must not kill rank 0 before it spoke."""
    error = faults.beyond_world(args, world)
    if error is None:
        return
    if rank == 0:  # (one write: print() writes the line's end apart, and other ranks write to this stream too)
        sys.stderr.write(f"{p.format_usage()}{p.prog}: error: {error}\n")
        sys.stderr.flush()
    barrier()
    sys.exit(2)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _load_digits():  # -> sklearn's loader, or None
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        return None
    return load_digits


def load_data(choice: str, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(features, labels, name): scikit-learn's digits, or a look-alike from a seeded RNG."""
    loader = _load_digits() if choice != "synthetic" else None
    if loader is None:
        rng = np.random.default_rng(seed)
        centers = rng.normal(0.0, 1.0, (10, 64))
        labels = rng.integers(0, 10, 1797)
        features = centers[labels] + rng.normal(0.0, 2.5, (1797, 64))
        name = "synthetic digits-like data" + (" (scikit-learn not installed)" if choice == "auto" else "")
    else:
        digits = loader()
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
