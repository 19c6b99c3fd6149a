"""What `distvlog.torch.backward_vlog_guard` costs a PyTorch training step, side by side in one run.

Model: MLP 784-256-256-10 (Linear, ReLU, Linear, ReLU, Linear), softmax cross-entropy, SGD, batch 64, float32,
one thread, one process. The guard is open around the middle Linear+ReLU during the forward, at level 0, 4
and 5, against the same step with no guard; the tagged nodes' lines go to a real rank file (a temporary log
dir). Goals: <= 1.03x at level 0, <= 1.10x at level 4, <= 1.20x at level 5. A control runs the unguarded step
twice (the method's noise).

Rounds alternate the variants (the order reversed every other round); each figure is the median over all
timed steps of all rounds, as this machine is shared and noisy.

    python benchmarks/bench_torch_guard.py [--rounds 15] [--steps 100]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy / torch load their BLAS

import argparse  # noqa: E402
import contextlib  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("DISTVLOG_LOG_DIR", tempfile.mkdtemp(prefix="bench-torch-guard-"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import distvlog.logger as dlog  # noqa: E402
import distvlog.torch as dvt  # noqa: E402

BATCH = 64
GOALS = {0: 1.03, 4: 1.10, 5: 1.20}


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 256), nn.Linear(256, 256), nn.Linear(256, 10)

    def forward(self, x: torch.Tensor, level: int | None) -> torch.Tensor:
        h = F.relu(self.fc1(x))
        with dvt.backward_vlog_guard(level) if level is not None else contextlib.nullcontext():
            h = F.relu(self.fc2(h))
        return self.fc3(h)


def make_step() -> Callable[[int | None], None]:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(BATCH, 784), torch.randint(0, 10, (BATCH,))

    def step(level: int | None) -> None:
        opt.zero_grad()
        F.cross_entropy(model(x, level), y).backward()
        opt.step()

    return step


def timed(step: Callable[[int | None], None], n: int, level: int | None) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step(level)
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(1)

    variants: dict[str, int | None] = {"no guard": None, "control (no guard)": None, "level 0": 0, "level 4": 4}
    variants["level 5"] = 5
    step = make_step()
    for level in variants.values():
        timed(step, 5, level)  # warm-up: allocator, the rank file
    times: dict[str, list[float]] = {label: [] for label in variants}
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(variants)[::-1]
        for label in order:
            times[label] += timed(step, args.steps, variants[label])
    dlog.flush()
    med = {label: statistics.median(t) * 1e6 for label, t in times.items()}
    base = med["no guard"]
    print(f"MLP 784-256-256-10, batch {BATCH}, SGD, torch {torch.__version__}, {args.rounds} rounds x {args.steps}")
    print(f"steps, median step time; guard on fc2+relu, lines to {dlog.log_file_path()}:")
    for label, us in med.items():
        level = variants[label]
        goal = f"  (goal <= {GOALS[level]:.2f}x)" if level is not None else ""
        print(f"  {label:20s} {us:8.1f} us  {us / base:5.3f}x{goal}")


if __name__ == "__main__":
    main()
