"""What a `backward_vlog_guard` on one Linear+ReLU adds to a training step, in one process, side by side.

Model: bench_dp.py's without MPI: MLP 64-256-256-256-256-10, batch 64, softmax cross-entropy, Adam, float32,
one BLAS thread. The guard is open around the second Linear+ReLU during the forward (its two backward nodes
log), at each of `--levels`, against the same step with no guard; the records go to a real rank file (a
temporary log dir). A control runs the unguarded step again (the method's noise).

Wall time: rounds alternate the variants (the order reversed every other round); a variant's figure in a
round is the median of its steps there; a ratio is the median over rounds of the per-round ratios (paired in
time: this machine is shared and noisy).

Instructions (`--callgrind`): the script runs itself under `valgrind --tool=callgrind` for 2 and for 12
steps at level 0 and at each level; the difference over 10 steps is deterministic, so a loaded machine
does not matter (the sink's flush timer is off there: its wake-ups are counted by wall time).

    python benchmarks/bench_guard_step.py [--rounds 15] [--steps 30] [--levels 4 5] [--callgrind]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy loads its BLAS

import argparse  # noqa: E402
import contextlib  # noqa: E402
import gc  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, REPO)
os.environ.setdefault("DISTVLOG_LOG_DIR", tempfile.mkdtemp(prefix="bench-guard-step-"))


def make_step() -> Callable[[int], float]:
    """One training step of the model, the guard (when the level is > 0) around its second layer."""
    import numpy as np

    import distvlog as dv
    import distvlog.nn.functional as F

    dv.seed(0)
    widths = [64, 256, 256, 256, 256]
    body = [dv.nn.Linear(a, b) for a, b in zip(widths, widths[1:])]
    head = dv.nn.Linear(256, 10)
    params = [p for layer in [*body, head] for p in layer.parameters()]
    opt = dv.optim.Adam(learning_rate=1e-3, parameters=params)
    rng = np.random.default_rng(0)
    x0 = dv.to_tensor(rng.standard_normal((64, 64)).astype("float32"))
    y = dv.to_tensor(rng.integers(0, 10, 64))

    def step(level: int) -> float:
        started = time.perf_counter()
        x = x0
        for i, layer in enumerate(body):
            with dv.backward_vlog_guard(level) if i == 1 and level else contextlib.nullcontext():
                x = F.relu(layer(x))
        F.cross_entropy(head(x), y).backward()
        opt.step()
        opt.clear_grad()
        return time.perf_counter() - started

    return step


def wall(args: argparse.Namespace) -> None:
    step = make_step()
    variants = {"no guard": 0, **{f"guard({lv})": lv for lv in args.levels}, "no guard (again)": 0}
    for level in variants.values():  # warm-up
        step(level)
    rounds: list[dict[str, float]] = []
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(variants)[::-1]
        medians = {}
        for name in order:
            step(variants[name])  # untimed: the previous variant left the caches cold for this one
            medians[name] = statistics.median(step(variants[name]) for _ in range(args.steps)) * 1e6
        rounds.append(medians)
    med = {name: statistics.median(r[name] for r in rounds) for name in variants}
    print(f"one process, MLP 64-256x4-10, batch 64, Adam; {args.rounds} rounds x {args.steps} steps, median step:")
    for name in variants:
        print(f"  {name:18s} {med[name]:9.1f} us")
    for name in variants:
        if name != "no guard":
            ratio = statistics.median(r[name] / r["no guard"] for r in rounds)
            extra = statistics.median(r[name] - r["no guard"] for r in rounds)
            print(f"{name} / no guard: {ratio:.3f}x, {extra:+.1f} us per step")


def callgrind(args: argparse.Namespace) -> None:
    def instructions(level: int, steps: int) -> int:
        with tempfile.TemporaryDirectory() as out:
            run = subprocess.run(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.out"]
                + [sys.executable, os.path.abspath(__file__), "--run", str(level), str(steps)],
                capture_output=True,
                text=True,
                # (the same dicts each run; no flush timer: its wake-ups count by wall time, and a loaded machine
                # slows valgrind down: they were ~0.1 M instructions per step here at a load of 15)
                env={**os.environ, "PYTHONHASHSEED": "0", "DISTVLOG_LOG_DIR": out, "DISTVLOG_FLUSH_INTERVAL": "100000"},
            )
        found = re.search(r"Collected : (\d+)", run.stderr)
        if run.returncode or not found:
            sys.exit(f"callgrind failed (level {level}, {steps} steps): {run.stderr[-2000:]}")
        return int(found.group(1))

    # (a first run writes the bytecode caches: compiling them would count in whichever run came first)
    subprocess.run([sys.executable, os.path.abspath(__file__), "--run", "5", "0"], capture_output=True, check=True)
    per_step = {level: (instructions(level, 12) - instructions(level, 2)) / 10 for level in [0, *args.levels]}
    print("instructions per step (callgrind, 12 steps minus 2, over 10):")
    for level, n in per_step.items():
        extra = "" if level == 0 else f"  (+{(n - per_step[0]) / 1e6:.3f} M, {n / per_step[0]:.3f}x)"
        print(f"  level {level}: {n / 1e6:.3f} M{extra}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=30, help="timed steps per variant and round")
    ap.add_argument("--levels", type=int, nargs="+", default=[4, 5])
    ap.add_argument("--callgrind", action="store_true", help="instructions per step instead of wall time")
    ap.add_argument("--run", type=int, nargs=2, metavar=("LEVEL", "STEPS"), help="just run: a warm-up, then STEPS")
    args = ap.parse_args()
    if args.run:
        level, steps = args.run
        step = make_step()
        gc.collect()
        gc.freeze()  # (a full collection would walk every object the imports made: millions of instructions,
        # in one run and not another)
        for _ in range(2 + steps):  # (two warm-up steps: the first builds caches)
            step(level)
    elif args.callgrind:
        callgrind(args)
    else:
        wall(args)


if __name__ == "__main__":
    main()
