"""What `distvlog.torch.backward_vlog_guard` costs a PyTorch training step, side by side in one run.

Model: MLP 784-256-256-10 (Linear, ReLU, Linear, ReLU, Linear), softmax cross-entropy, SGD, batch 64, float32,
one thread, one process. The guard is open around the middle Linear+ReLU during the forward, at level 0, 4
and 5, against the same step with no guard; the tagged nodes' lines go to a real rank file (a temporary log
dir). Goals: <= 1.03x at level 0, <= 1.10x at level 4, <= 1.20x at level 5. A control runs the unguarded step
twice (the method's noise).

The floor of the guard's design, measured on its own: the same region under a torch-function mode that does
what the guard must do whatever it logs — walk the nodes each call created, register a Python pre-hook and
hook on each — with hooks that do nothing. What the guard costs beyond it is what it logs.

Rounds alternate the variants (the order reversed every other round); each figure is the median over all
timed steps of all rounds. `--cpu` times each step by this thread's CPU time instead of the wall clock (torch
runs a CPU backward in the calling thread): on a machine shared with other jobs, wall times count the waits
for a core.

    python benchmarks/bench_torch_guard.py [--rounds 15] [--steps 100] [--cpu]
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
from torch.overrides import TorchFunctionMode  # noqa: E402

import distvlog.logger as dlog  # noqa: E402
import distvlog.torch as dvt  # noqa: E402

BATCH = 64
GOALS = {0: 1.03, 4: 1.10, 5: 1.20}


_NO_SEQ = (1 << 64) - 1  # AccumulateGrad's sequence number


def _pre(grad_outputs: tuple) -> None:
    return None


def _post(grad_inputs: tuple, grad_outputs: tuple) -> None:
    return None


class BareHooks(TorchFunctionMode):
    """The floor: a bare Python pre-hook and hook on each node created inside, as the guard registers them."""

    def __enter__(self) -> BareHooks:
        self.start = torch._C._autograd._get_sequence_nr()
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **kwargs) if kwargs else func(*args)
        todo = [out.grad_fn] if isinstance(out, torch.Tensor) else []
        while todo:
            node = todo.pop()
            seq = node._sequence_nr() if node is not None else -1
            if seq < self.start or seq == _NO_SEQ:
                continue
            meta = node.metadata
            if "bench" in meta:
                continue
            meta["bench"] = True
            node.register_prehook(_pre)
            node.register_hook(_post)
            todo += [nxt for nxt, _ in node.next_functions]
        return out


def region(level: int | str | None) -> contextlib.AbstractContextManager:
    """What the middle Linear+ReLU runs under."""
    if level is None:
        return contextlib.nullcontext()
    return BareHooks() if level == "floor" else dvt.backward_vlog_guard(level)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 256), nn.Linear(256, 256), nn.Linear(256, 10)

    def forward(self, x: torch.Tensor, level: int | str | None) -> torch.Tensor:
        h = F.relu(self.fc1(x))
        with region(level):
            h = F.relu(self.fc2(h))
        return self.fc3(h)


def make_step() -> Callable[[int | str | None], None]:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(BATCH, 784), torch.randint(0, 10, (BATCH,))

    def step(level: int | str | None) -> None:
        opt.zero_grad()
        F.cross_entropy(model(x, level), y).backward()
        opt.step()

    return step


def timed(
    step: Callable[[int | str | None], None], n: int, level: int | str | None, clock: Callable[[], float]
) -> list[float]:
    times = []
    for _ in range(n):
        t0 = clock()
        step(level)
        times.append(clock() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--cpu", action="store_true", help="time steps by this thread's CPU time")
    args = ap.parse_args()
    torch.set_num_threads(1)
    clock = time.thread_time if args.cpu else time.perf_counter

    variants: dict[str, int | str | None] = {"no guard": None, "control (no guard)": None, "level 0": 0}
    variants.update({"floor (bare hooks)": "floor", "level 4": 4, "level 5": 5})
    step = make_step()
    for level in variants.values():
        timed(step, 5, level, clock)  # warm-up: allocator, the rank file
    times: dict[str, list[float]] = {label: [] for label in variants}
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(variants)[::-1]
        for label in order:
            times[label] += timed(step, args.steps, variants[label], clock)
    dlog.flush()
    med = {label: statistics.median(t) * 1e6 for label, t in times.items()}
    base = med["no guard"]
    print(f"MLP 784-256-256-10, batch {BATCH}, SGD, torch {torch.__version__}, {args.rounds} rounds x {args.steps}")
    clock_name = "thread CPU time" if args.cpu else "wall time"
    print(f"steps, median step {clock_name}; guard on fc2+relu, lines to {dlog.log_file_path()}:")
    for label, us in med.items():
        level = variants[label]
        goal = f"  (goal <= {GOALS[level]:.2f}x)" if level in GOALS else ""
        print(f"  {label:20s} {us:8.1f} us  {us / base:5.3f}x{goal}")


if __name__ == "__main__":
    main()
