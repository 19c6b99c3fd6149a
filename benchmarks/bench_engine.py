"""Training-step speed: distvlog vs. PyTorch eager on the CPU, side by side in one run.

Two models, float32, softmax cross-entropy, SGD, one thread each: this script sets OMP_NUM_THREADS /
OPENBLAS_NUM_THREADS / MKL_NUM_THREADS=1 before numpy or torch is imported and calls torch.set_num_threads(1).
Both frameworks start from the same weights and see the same data.

- MLP 784-128-10 (Linear, ReLU, Linear) at batch 1, 32 and 128.
- LeNet, the model of Paddle's debugging guide (Conv2D(3,6,3,1), Sigmoid, MaxPool2D(2,2), Conv2D(6,16,3,1),
  Sigmoid, MaxPool2D(2,2), reshape, Linear(576,120), Sigmoid, Linear(120,84), Sigmoid, Linear(84,10)) on
  [32, 3, 32, 32]. Goal: within 1.5x of PyTorch.

Modes:
- train step: clear gradients, forward, loss, backward, optimizer step. Gradients are dropped, not zeroed:
  `opt.clear_grad(set_to_zero=False)` in distvlog, `opt.zero_grad()` (set_to_none) in PyTorch.
- fwd+bwd: forward, loss, backward with gradients accumulating, no optimizer.
- per-op: `a + b` on 2-element tensors, `a` requiring grad, so the graph is recorded.

A third contender, "stacks", is distvlog with FLAGS_call_stack_level=3 (every node records its whole
forward stack, for the forward traceback of a failing node): the same steps, each between two
`set_flags` calls (about a microsecond); its ratio is against plain distvlog.

Rounds are interleaved (distvlog, torch, distvlog, ...) and each figure is the median over all timed steps
of all rounds, because these machines are noisy. PyTorch is only a baseline; without it (it is not a
dependency) the script prints distvlog's own figures. Install it beside distvlog in a separate venv:
`python3 -m venv /tmp/venv-bench && /tmp/venv-bench/bin/pip install torch==2.13.0 numpy structlog orjson mpi4py`.

    python benchmarks/bench_engine.py [--rounds 7] [--steps 300] [--batches 1 32 128] [--lenet-batches 32]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy / torch load their BLAS

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import distvlog as dv  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

IN, HIDDEN, OUT, LR = 784, 128, 10, 0.01


class LeNet(dv.nn.Layer):
    """The model of Paddle's debugging guide, as the guide writes it."""

    def __init__(self) -> None:
        super().__init__()
        nn = dv.nn
        self.conv = nn.Sequential(
            nn.Conv2D(3, 6, 3, 1), nn.Sigmoid(), nn.MaxPool2D(2, 2),
            nn.Conv2D(6, 16, 3, 1), nn.Sigmoid(), nn.MaxPool2D(2, 2),
        )  # fmt: skip
        self.fc = nn.Sequential(
            nn.Linear(16 * 6 * 6, 120), nn.Sigmoid(), nn.Linear(120, 84), nn.Sigmoid(), nn.Linear(84, OUT)
        )

    def forward(self, img: dv.Tensor) -> dv.Tensor:
        return self.fc(self.conv(img).reshape([img.shape[0], -1]))


def dv_models() -> dict[str, Callable[[], Any]]:
    nn = dv.nn
    return {"MLP": lambda: nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT)), "LeNet": LeNet}


def torch_models() -> dict[str, Callable[[], Any]]:
    nn = torch.nn

    class TorchLeNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Sequential(
                nn.Conv2d(3, 6, 3, 1), nn.Sigmoid(), nn.MaxPool2d(2, 2),
                nn.Conv2d(6, 16, 3, 1), nn.Sigmoid(), nn.MaxPool2d(2, 2),
            )  # fmt: skip
            self.fc = nn.Sequential(
                nn.Linear(16 * 6 * 6, 120), nn.Sigmoid(), nn.Linear(120, 84), nn.Sigmoid(), nn.Linear(84, OUT)
            )

        def forward(self, img: Any) -> Any:
            return self.fc(self.conv(img).reshape(img.shape[0], -1))

    return {"MLP": lambda: nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT)), "LeNet": TorchLeNet}


def dv_setup(
    model_name: str, weights: list[np.ndarray], x: np.ndarray, y: np.ndarray
) -> dict[str, Callable[[], object]]:
    model = dv_models()[model_name]()
    model.set_state_dict(dict(zip(model.state_dict(), weights)))
    opt = dv.optim.SGD(learning_rate=LR, parameters=model.parameters())
    xt, yt = dv.to_tensor(x), dv.to_tensor(y)
    cross_entropy = dv.nn.functional.cross_entropy

    def train() -> None:
        opt.clear_grad(set_to_zero=False)
        cross_entropy(model(xt), yt).backward()
        opt.step()

    def fwd_bwd() -> None:
        cross_entropy(model(xt), yt).backward()

    a, b = dv.randn([2]), dv.randn([2])
    a.stop_gradient = False
    return {"train": train, "fwd_bwd": fwd_bwd, "op": lambda: a + b}


def dv_stacks_setup(
    model_name: str, weights: list[np.ndarray], x: np.ndarray, y: np.ndarray
) -> dict[str, Callable[[], object]]:
    """distvlog's steps at FLAGS_call_stack_level=3 (not the per-op case: two set_flags would swamp it)."""

    def at_level_3(fn: Callable[[], object]) -> Callable[[], None]:
        def step() -> None:
            dv.set_flags({"FLAGS_call_stack_level": 3})
            try:
                fn()
            finally:
                dv.set_flags({"FLAGS_call_stack_level": 1})

        return step

    fns = dv_setup(model_name, weights, x, y)
    return {mode: at_level_3(fns[mode]) for mode in ("train", "fwd_bwd")}


def torch_setup(
    model_name: str, weights: list[np.ndarray], x: np.ndarray, y: np.ndarray
) -> dict[str, Callable[[], object]]:
    model = torch_models()[model_name]()
    with torch.no_grad():  # PyTorch stores Linear weights as [out, in]; convolution filters as Paddle does
        for param, w in zip(model.parameters(), weights):
            param.copy_(torch.from_numpy(w.T.copy() if w.ndim == 2 else w))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    cross_entropy = torch.nn.functional.cross_entropy

    def train() -> None:
        opt.zero_grad()
        cross_entropy(model(xt), yt).backward()
        opt.step()

    def fwd_bwd() -> None:
        cross_entropy(model(xt), yt).backward()

    a, b = torch.randn(2, requires_grad=True), torch.randn(2)
    return {"train": train, "fwd_bwd": fwd_bwd, "op": lambda: a + b}


def time_steps(fn: Callable[[], object], steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def time_op(fn: Callable[[], object], calls: int) -> list[float]:
    """Seconds per call, from batches of calls (one call is too short to time alone)."""
    out = []
    for _ in range(20):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=300, help="timed steps per round and contender")
    parser.add_argument("--batches", type=int, nargs="*", default=[1, 32, 128], help="the MLP's")
    parser.add_argument("--lenet-batches", type=int, nargs="*", default=[32])
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    dv.seed(0)
    weights = {name: [p.numpy().copy() for p in make().parameters()] for name, make in dv_models().items()}
    frameworks = {"distvlog": dv_setup, "stacks": dv_stacks_setup}
    if torch is not None:
        torch.set_num_threads(1)
        frameworks["torch"] = torch_setup
    print(
        f"distvlog {dv.__version__} on numpy {np.__version__}; "
        + (
            f"torch {torch.__version__}"
            if torch
            else "torch not installed (the baseline: pip install torch==2.13.0), distvlog's figures only"
        )
        + "; one thread each (OMP/OPENBLAS/MKL_NUM_THREADS=1, torch.set_num_threads(1))"
    )
    print(
        f"MLP {IN}-{HIDDEN}-{OUT} and LeNet (Paddle's debugging guide), float32, SGD lr={LR}; median of "
        f"{args.rounds} interleaved rounds x {args.steps} steps\n"
    )

    inputs = {"MLP": lambda batch: (batch, IN), "LeNet": lambda batch: (batch, 3, 32, 32)}
    cases = {}  # (model, batch, mode) -> framework -> step functions
    for model_name, batches in (("MLP", args.batches), ("LeNet", args.lenet_batches)):
        for batch in batches:
            x = rng.standard_normal(inputs[model_name](batch)).astype(np.float32)
            y = rng.integers(0, OUT, batch).astype(np.int64)
            setups = {name: setup(model_name, weights[model_name], x, y) for name, setup in frameworks.items()}
            for mode in ("train", "fwd_bwd"):
                cases[model_name, batch, mode] = {name: s[mode] for name, s in setups.items()}
    op_fns = {
        name: fns["op"]
        for name, setup in frameworks.items()
        if "op" in (fns := setup("MLP", weights["MLP"], np.zeros((1, IN), np.float32), np.zeros(1, np.int64)))
    }

    samples: dict[tuple, list[float]] = {}
    for fns in cases.values():  # warm up: caches, allocator, lazy imports
        for fn in fns.values():
            time_steps(fn, 20)
    for _ in range(args.rounds):
        for key, fns in cases.items():
            for name, fn in fns.items():
                samples.setdefault((*key, name), []).extend(time_steps(fn, args.steps))
        for name, fn in op_fns.items():
            samples.setdefault(("op", name), []).extend(time_op(fn, 500))

    med = {key: statistics.median(v) * 1e6 for key, v in samples.items()}
    has_torch = "torch" in frameworks
    header = f"{'what':<30}{'distvlog µs':>12}{'stacks µs':>11}{'/ dv':>6}" + (
        f"{'torch µs':>12}{'ratio':>8}" if has_torch else ""
    )
    print(header)
    print("-" * len(header))
    rows = [
        (f"{model} {'train step' if mode == 'train' else 'fwd+bwd'} batch {batch}", (model, batch, mode))
        for model, batch, mode in sorted(cases, key=lambda k: (k[0] != "MLP", k[2] != "train", k[1]))
    ]
    rows.append(("per-op a + b", ("op",)))
    for label, key in rows:
        ours = med[(*key, "distvlog")]
        stacks = med.get((*key, "stacks"))
        line = f"{label:<30}{ours:>12.1f}" + (
            f"{stacks:>11.1f}{stacks / ours:>6.2f}" if stacks else f"{'-':>11}{'':>6}"
        )
        if has_torch:
            line += f"{med[(*key, 'torch')]:>12.1f}{med[(*key, 'distvlog')] / med[(*key, 'torch')]:>8.2f}"
        print(line)
    if has_torch:
        print(
            "\nratio = distvlog / torch (below 1.0: distvlog is faster). MLP: done at <= 1.0 for every train step, "
            "goal <= 0.8 at batch 1. LeNet: goal <= 1.5."
        )
    print("/ dv = distvlog at FLAGS_call_stack_level=3 / distvlog (the cost of recording every node's forward stack)")


if __name__ == "__main__":
    main()
