"""The guard machinery's cost on a training step with no guard open (goal: <= 3 %), side by side in one run,
and the cost per line a tagged node logs.

"Shipped" is the engine as it is: at the start of every backward pass it asks each factory in
`engine.PASS_OBSERVERS` (the node log, the subgraph capture) whether the pass needs an observer, and runs
the loop with what they return (nothing, with no guard open and verbosity 0). "Bypassed" is the same
engine with `PASS_OBSERVERS` emptied, the seam that list is: no factory is asked, no observer exists. The
difference is what deciding per pass costs; a control runs the shipped engine again (the method's noise).
Common to both, and so not in the difference: the two thread-local reads per forward op that tag a node
(`dispatch.apply`), the `tagged` flag each node carries and the pass's check of it, which are a few
attribute reads per op.

Model: MLP 784-128-10 (Linear, ReLU, Linear), softmax cross-entropy, SGD, float32, one BLAS thread.
Rounds alternate the variants; figures are medians over all timed steps.

    python benchmarks/bench_guard.py [--rounds 15] [--steps 100] [--batch 32]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("DISTVLOG_LOG_DIR", tempfile.mkdtemp(prefix="bench-guard-"))
import distvlog as dv  # noqa: E402
import distvlog.logger as dlog  # noqa: E402
import distvlog.nn.functional as F  # noqa: E402
from distvlog.autograd import engine  # noqa: E402


def make_step(batch: int) -> Callable[[int], None]:
    dv.seed(0)
    model = dv.nn.Sequential(dv.nn.Linear(784, 128), dv.nn.ReLU(), dv.nn.Linear(128, 10))
    opt = dv.optim.SGD(learning_rate=0.01, parameters=model.parameters())
    rng = np.random.default_rng(0)
    x = dv.to_tensor(rng.standard_normal((batch, 784)).astype("float32"))
    y = dv.to_tensor(rng.integers(0, 10, batch))

    def step(guard_level: int = -1) -> None:
        if guard_level >= 0:
            with dv.backward_vlog_guard(guard_level):
                out = model(x)
        else:
            out = model(x)
        F.cross_entropy(out, y).backward()
        opt.step()
        opt.clear_grad(set_to_zero=False)

    return step


def records_written() -> int:
    """Records in this process's rank file so far (counted in the file: a counting processor would take
    the engine's lines off their fast path)."""
    dlog.flush()
    path = dlog.log_file_path()
    return len(re.findall(rb"^[IWEF]\d{4} ", path.read_bytes(), re.M)) if path else 0


def timed(step: Callable[..., None], n: int, *args: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step(*args)
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()

    shipped = list(engine.PASS_OBSERVERS)
    variants = {"shipped": shipped, "bypassed": [], "control (again)": shipped}

    step = make_step(args.batch)
    times: dict[str, list[float]] = {label: [] for label in variants}
    for _ in range(3):
        step()
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(variants)[::-1]  # no variant always goes first
        for label in order:
            engine.PASS_OBSERVERS[:] = variants[label]
            times[label] += timed(step, args.steps)
    engine.PASS_OBSERVERS[:] = shipped
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    print(f"MLP 784-128-10, batch {args.batch}, SGD, {args.rounds} rounds x {args.steps} steps, median step time:")
    for label, us in med.items():
        print(f"  {label:16s} {us:9.1f} us")
    print(
        f"guard machinery overhead with no guard open: {med['shipped'] / med['bypassed'] - 1:+.2%} "
        f"(goal <= +3%); control vs. shipped (noise, same code): "
        f"{med['control (again)'] / med['shipped'] - 1:+.2%}"
    )

    for level in (4, 5):
        plain, tagged, before = [], [], records_written()
        for _ in range(max(3, args.rounds // 3)):
            plain += timed(step, 20)  # (at the global level 0, an untagged step logs nothing)
            tagged += timed(step, 20, level)
        per_step = (records_written() - before) / len(tagged)
        extra = statistics.median(tagged) - statistics.median(plain)
        print(
            f"whole model tagged at level {level}: {per_step:.0f} lines per step, "
            f"{extra / per_step * 1e6:.1f} us per logged line (rendered and written to the rank file)"
        )


if __name__ == "__main__":
    main()
