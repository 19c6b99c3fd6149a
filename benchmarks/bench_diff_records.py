"""What the records `distvlog diff` needs cost per training step, on 4 MPI ranks, side by side in one run:
launch/train.py's model (MLP 64-H-H-10, the middle layer under `backward_vlog_guard(5)`, Adam, batch 32
per rank) with DataParallel's records

- off (module `parallel` at verbosity 0),
- on (verbosity 1, train.py's default: the parameter digests of every step, each bucket's checksum and
  norm going in, its checksum and wait coming out),
- on without the parameter digests (`digest_every` beyond the run),
- off again (an A/A control: their ratio is the noise).

Configurations alternate round by round on the same processes; a ratio is the median of per-round ratios.

    python benchmarks/bench_diff_records.py [-n 4] [--rounds 15] [--steps 20] [--hidden 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "launch"))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=4, help="ranks")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--steps", type=int, default=20, help="timed steps per configuration and round")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def worker(args: argparse.Namespace) -> None:
    import numpy as np
    from mpi4py import MPI
    from train import MLP

    import distvlog as dv
    import distvlog.nn.functional as F

    dv.init()
    rank = dv.get_rank()
    dv.seed(0)
    rng = np.random.default_rng(rank)
    x = dv.to_tensor(rng.standard_normal((32, 64)).astype("float32"))
    y = dv.to_tensor(rng.integers(0, 10, 32))
    model = dv.DataParallel(MLP(args.hidden, 5), comm_buffer_size=0.02)
    opt = dv.optim.Adam(learning_rate=1e-3, parameters=model.parameters())
    configs = {  # name -> (verbosity of `parallel`, digest_every)
        "records off": (0, 1),
        "records on": (1, 1),
        "records on, no digests": (1, 10**9),
        "records off (A/A)": (0, 1),
    }

    def step(name: str) -> float:
        level, model.digest_every = configs[name]
        dv.set_vlog_level({"parallel": level})
        started = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return time.perf_counter() - started

    for name in configs:
        step(name)
    rounds: list[dict[str, float]] = []
    for _ in range(args.rounds):
        medians = {}
        for name in configs:
            step(name)
            MPI.COMM_WORLD.Barrier()
            medians[name] = statistics.median(step(name) for _ in range(args.steps)) * 1e3
        rounds.append(medians)
    if rank == 0:
        med = {name: statistics.median(r[name] for r in rounds) for name in configs}

        def ratio(a: str, b: str) -> float:
            return statistics.median(r[a] / r[b] for r in rounds)

        def extra(a: str, b: str) -> float:
            return statistics.median(r[a] - r[b] for r in rounds) * 1e3

        print(
            f"{args.n} ranks, MLP 64-{args.hidden}-{args.hidden}-10 (guard 5 on the middle layer), batch 32/rank, "
            f"{len(model.buckets)} buckets, {args.rounds} rounds x {args.steps} steps, median step time:"
        )
        for name in configs:
            print(f"  {name:24s} {med[name]:8.3f} ms")
        print(
            f"records on / off: {ratio('records on', 'records off'):.3f}x, "
            f"{extra('records on', 'records off'):+.0f} us per step"
        )
        print(
            f"digests: {ratio('records on', 'records on, no digests'):.3f}x, "
            f"{extra('records on', 'records on, no digests'):+.0f} us per step"
        )
        print(
            f"A/A control: {ratio('records off (A/A)', 'records off'):.3f}x, "
            f"{extra('records off (A/A)', 'records off'):+.0f} us per step"
        )
    dv.finalize()


if __name__ == "__main__":
    from bench_dp import launch

    arguments = parse_args()
    worker(arguments) if arguments.worker else launch(arguments, __file__)
