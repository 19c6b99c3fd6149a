"""Data-parallel step time on 4 MPI ranks, side by side in one run:

- a `backward_vlog_guard(5)` around one layer (its backward nodes write their level 3-5 lines and
  gradient statistics) vs. no guard (goal: <= 1.10x);
- bucketed allreduce (DataParallel's default bucket size) vs. one allreduce per parameter.

The guard's cost is mostly fixed per tagged node (~15 records each) plus passes over its gradients, so
the ratio falls as layers grow: try `--hidden 512 --batch 128` and `--hidden 1024 --batch 128` too.

Model: MLP 64-H-...-H-10 (`--layers` hidden layers of width `--hidden`), batch `--batch` per rank, Adam,
DataParallel at v=1 (its allreduce records on). Configurations alternate round by round; a ratio is the
median of per-round ratios (paired in time, because these machines are noisy and 4 ranks on 2 cores are
oversubscribed), and "no guard" and "bucketed" are the same configuration: their ratio is the noise.
Run it as a plain script; it starts its own ranks with the launcher `distvlog launch` would use.

    python benchmarks/bench_dp.py [-n 4] [--rounds 15] [--steps 20] [--hidden 256] [--layers 4] [--batch 64]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=4, help="ranks")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--steps", type=int, default=20, help="timed steps per configuration and round")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def launch(args: argparse.Namespace, script: str = __file__) -> None:
    """Run `script --worker ARGS` on `args.n` ranks with the launcher `distvlog launch` would use."""
    from distvlog.launch.command import find_launcher, launcher_kind, mpi_command

    launcher = find_launcher(None)
    with tempfile.TemporaryDirectory() as logs:
        env = {
            **os.environ,
            "DISTVLOG_LOG_DIR": logs,
            "PYTHONPATH": str(REPO),
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        cmd = mpi_command(launcher, launcher_kind(launcher), args.n, {}, None)
        cmd += [sys.executable, script, "--worker", *sys.argv[1:]]
        sys.exit(subprocess.run(cmd, env=env).returncode)


def worker(args: argparse.Namespace) -> None:
    import numpy as np

    import distvlog as dv
    import distvlog.nn.functional as F

    class Deep(dv.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            widths = [64] + [args.hidden] * args.layers
            self.body = dv.nn.Sequential(*[dv.nn.Linear(a, b) for a, b in zip(widths, widths[1:])])
            self.head = dv.nn.Linear(args.hidden, 10)
            self.guard_level = 0

        def forward(self, x: dv.Tensor) -> dv.Tensor:
            for i, layer in enumerate(self.body):
                guarded = i == 1 and self.guard_level
                with dv.backward_vlog_guard(self.guard_level) if guarded else contextlib.nullcontext():
                    x = F.relu(layer(x))
            return self.head(x)

    dv.init()
    dv.set_vlog_level({"parallel": 1})
    rank = dv.get_rank()
    dv.seed(0)
    rng = np.random.default_rng(rank)
    x = dv.to_tensor(rng.standard_normal((args.batch, 64)).astype("float32"))
    y = dv.to_tensor(rng.integers(0, 10, args.batch))
    nets = {"bucketed": Deep(), "per-parameter": Deep()}
    models = {
        "bucketed": dv.DataParallel(nets["bucketed"]),
        "per-parameter": dv.DataParallel(nets["per-parameter"], comm_buffer_size=1e-9),
    }
    opts = {k: dv.optim.Adam(learning_rate=1e-3, parameters=m.parameters()) for k, m in models.items()}
    configs = {
        "no guard": ("bucketed", 0),
        "guard(5) on one layer": ("bucketed", 5),
        "bucketed": ("bucketed", 0),
        "per-parameter": ("per-parameter", 0),
    }

    def step(name: str) -> float:
        key, level = configs[name]
        nets[key].guard_level = level
        started = time.perf_counter()
        loss = F.cross_entropy(models[key](x), y)
        loss.backward()
        opts[key].step()
        opts[key].clear_grad()
        return time.perf_counter() - started

    from mpi4py import MPI

    for name in configs:  # warm-up
        step(name)
    rounds: list[dict[str, float]] = []  # per round, each configuration's median step time (ms)
    for _ in range(args.rounds):
        medians = {}
        for name in configs:
            step(name)  # untimed: the previous configuration's model left the caches cold for this one
            MPI.COMM_WORLD.Barrier()
            medians[name] = statistics.median(step(name) for _ in range(args.steps)) * 1e3
        rounds.append(medians)
    if rank == 0:
        med = {name: statistics.median(r[name] for r in rounds) for name in configs}

        def ratio(a: str, b: str) -> float:  # paired by round: the machine's drift cancels out
            return statistics.median(r[a] / r[b] for r in rounds)

        buckets = {k: len(m.buckets) for k, m in models.items()}
        print(
            f"{args.n} ranks, MLP 64-{'-'.join([str(args.hidden)] * args.layers)}-10, batch {args.batch}/rank, "
            f"{args.rounds} rounds x {args.steps} steps, median step time:"
        )
        for name in configs:
            print(f"  {name:24s} {med[name]:8.2f} ms")
        print(
            f"guard overhead: {ratio('guard(5) on one layer', 'no guard'):.3f}x (goal <= 1.10x), "
            f"{med['guard(5) on one layer'] - med['no guard']:.2f} ms per step"
        )
        print(
            f"per-parameter ({buckets['per-parameter']} allreduces) / bucketed ({buckets['bucketed']}): "
            f"{ratio('per-parameter', 'bucketed'):.3f}x"
        )
        print(f"A/A control, 'bucketed' / 'no guard' (the same configuration): {ratio('bucketed', 'no guard'):.3f}x")
    dv.finalize()


if __name__ == "__main__":
    arguments = parse_args()
    worker(arguments) if arguments.worker else launch(arguments)
