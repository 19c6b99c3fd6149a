"""What the stacks request handler (the `distvlog-stacks` thread every logging process runs, which looks for a
request once a second) costs a training step while no one asks, with an A/A control.

Each round runs three processes one after the other, the order turned every other round: the handler on (a
rank file open, as in any rank), the handler off (the same, with the thread not started), and the handler on
again (the A/A control: the method's noise). Each process times bench_guard_step.py's step (MLP
64-256x4-10, batch 64, Adam, one BLAS thread, no guard) for `--seconds`, long enough for the thread to wake
several times, and reports its median and mean step (a wake-up that lands in a step shows in the mean). A
ratio is the median over rounds of the per-round ratios.

    python benchmarks/bench_stacks_handler.py [--rounds 7] [--seconds 4]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy loads its BLAS

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
VARIANTS = ("on", "off", "on (again)")


def child(handler: bool, seconds: float) -> None:
    """One process: a rank file open (the handler's thread started or not), then steps for `seconds`."""
    from bench_guard_step import make_step

    import distvlog as dv
    from distvlog.logger import _stacks
    from distvlog.logger._sink import SINK

    if not handler:
        SINK.on_open.remove(_stacks._on_open)
    dv.get_logger().info("bench")  # opens the rank file: the handler's thread starts with it
    running = any(t.name == "distvlog-stacks" for t in threading.enumerate())
    if running != handler:
        sys.exit(f"the stacks thread is {'running' if running else 'not running'}; expected the opposite")
    step = make_step()
    for _ in range(3):
        step(0)
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        times.append(step(0))
    print(json.dumps({"median": statistics.median(times) * 1e6, "mean": statistics.fmean(times) * 1e6}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=4.0, help="timed steps per process")
    ap.add_argument("--child", choices=["on", "off"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child == "on", args.seconds)
        return
    rounds: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="bench-stacks-") as logs:
        env = {**os.environ, "DISTVLOG_LOG_DIR": logs}
        for r in range(args.rounds):
            found = {}
            for name in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                cmd = [sys.executable, __file__, "--child", name.split()[0], "--seconds", str(args.seconds)]
                found[name] = json.loads(
                    subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
                )
            rounds.append(found)
    print(f"{args.rounds} rounds x {args.seconds:g} s of steps per process (MLP 64-256x4-10, batch 64, Adam):")
    for name in VARIANTS:
        median = statistics.median(r[name]["median"] for r in rounds)
        mean = statistics.median(r[name]["mean"] for r in rounds)
        print(f"  handler {name:11s} median step {median:8.1f} us, mean {mean:8.1f} us")
    for stat in ("median", "mean"):
        on = statistics.median(r["on"][stat] / r["off"][stat] for r in rounds)
        aa = statistics.median(r["on (again)"][stat] / r["on"][stat] for r in rounds)
        print(f"{stat} step: on / off {on:.3f}x; A/A (on again / on) {aa:.3f}x")


if __name__ == "__main__":
    main()
