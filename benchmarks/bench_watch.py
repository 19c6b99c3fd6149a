"""How soon `distvlog watch` gives its verdict after the record that proves it, on real ranks.

Each case runs `distvlog launch -n N launch/train.py` with a fault planted three quarters into the run (the
watch is up and has followed the job a while: what a user who watches a job sees, not the watch's start)
and `distvlog watch --json` beside it, and notes when each verdict line arrives (this machine's clock, which
the ranks on it share):
- NaN: from the NaN rank's grad_stats record (the verdict's `ts`) to the verdict;
- desync: from the record that proves it, the last rank's start of the step after the differing one (a
  step is judged once every rank has gone past it) to the verdict;
- hang (one allreduce fewer, --hang-after H): from the last record any rank wrote before the verdict, less H,
  to the verdict (the stacks request is most of it).
Each case runs twice: with the job and the watch sharing every core (on a machine with fewer cores than
ranks, as this 2-core one, ranks that busy-wait in MPI leave the watch a fraction of one), and with the
watch on a core of its own, the job on the others (as on a training node, whose ranks drive accelerators and
leave cores free; where there is one core only, the second run is left out).
Then what a user has today: PyTorch's collective timeout (its watchdog: 10 min for NCCL, 30 for gloo, by
default) before anything is said, and `distvlog diff` after the job was stopped (its run time).
The stacks handler's cost on a step: one stat() of the request file per second per rank, timed here.

    python benchmarks/bench_watch.py [--ranks 4] [--steps 120] [--hang-after 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN = str(REPO / "launch" / "train.py")
NCCL_TIMEOUT_S, GLOO_TIMEOUT_S = 600, 1800


def _env(logs: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_"))}
    return {**env, "PYTHONPATH": str(REPO), "DISTVLOG_LOG_DIR": str(logs)}


def _run_dir(logs: Path, ranks: int) -> Path:
    while True:
        for run in logs.glob("*-*"):
            if run.is_dir() and len(list(run.glob("rank-*.log"))) == ranks:
                return run
        time.sleep(0.05)


def _on(cpus: set[int] | None):
    """A child's start: on these cores only (None: wherever the system puts it)."""
    return None if cpus is None else lambda: os.sched_setaffinity(0, cpus)


def watched(
    tmp: Path, ranks: int, steps: int, fault: list[str], watch_args: list[str], own_core: bool
) -> tuple[Path, list]:
    """(run dir, [(arrival time, verdict)]) of train.py with `fault`, watched until the job has ended; with
    `own_core`, the watch on the first core and the job on the others."""
    cores = sorted(os.sched_getaffinity(0))
    job_cpus, watch_cpus = (set(cores[1:]), {cores[0]}) if own_core else (None, None)
    logs = tmp / f"logs-{len(list(tmp.iterdir()))}"
    cmd = [sys.executable, "-m", "distvlog"]
    job = subprocess.Popen(
        [*cmd, "launch", "-n", str(ranks), TRAIN, "--data", "synthetic", "--steps", str(steps), *fault],
        env=_env(logs),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_on(job_cpus),
    )
    run_dir = _run_dir(logs, ranks)
    watch = subprocess.Popen(
        [*cmd, "watch", "--json", *watch_args, str(run_dir)],
        env=_env(logs),
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_on(watch_cpus),
    )
    found = [(time.time(), json.loads(line)) for line in watch.stdout]
    watch.wait()
    job.wait()
    return run_dir, found


def _logs(run_dir: Path):
    sys.path.insert(0, str(REPO))
    from distvlog.tools.diff import load

    return load([str(run_dir)])


def cases(tmp: Path, args: argparse.Namespace, own_core: bool) -> str:
    """The three cases in one setting; the run directory of the last (the hang, stopped)."""
    print(
        "the watch on a core of its own, the job on the others:" if own_core else "the job and the watch on every core:"
    )
    at_step = str(args.steps * 3 // 4)
    nan = ["--inject-nan-rank", "1", "--inject-nan-step", at_step]
    _, found = watched(tmp, args.ranks, args.steps, nan, [], own_core)
    at, v = next((t, v) for t, v in found if v["kind"] == "nan_origin")
    print(f"  NaN:    verdict {at - v['ts'] / 1e6:6.2f} s after the NaN rank's record (live: {v['live']})")

    graph = ["--inject-graph-rank", "1", "--inject-graph-step", at_step]
    run_dir, found = watched(tmp, args.ranks, args.steps, graph, [], own_core)
    at, v = next((t, v) for t, v in found if v["kind"] == "desync")
    proof = max(mine.step_ts[v["step"] + 1] for mine in _logs(run_dir).ranks.values()) / 1e6
    print(f"  desync: verdict {at - proof:6.2f} s after the record that proves it (live: {v['live']})")

    skip = ["--inject-skip-allreduce-rank", "1", "--inject-skip-allreduce-step", "3"]
    started = time.time()
    hang = ["--stop-on-error", "--hang-after", str(args.hang_after)]
    run_dir, found = watched(tmp, args.ranks, args.steps, skip, hang, own_core)
    at, v = next((t, v) for t, v in found if v["kind"] == "hang")
    logs = _logs(run_dir)
    last = max(
        max([s.ts for s in mine.stats] + [c.begun_ts for c in mine.collectives] + list(mine.step_ts.values()))
        for mine in logs.ranks.values()
    )
    print(
        f"  hang:   verdict {at - last / 1e6 - args.hang_after:6.2f} s past the threshold ({args.hang_after:g} s "
        f"after the last record); job run and stopped in {time.time() - started:.1f} s"
    )
    return str(run_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--hang-after", type=float, default=3.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        run_dir = cases(tmp, args, own_core=False)
        if len(os.sched_getaffinity(0)) > 1:
            cases(tmp, args, own_core=True)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "distvlog", "diff", run_dir], env=_env(tmp), capture_output=True)
        print(
            f"today:  nothing until PyTorch's timeout ({NCCL_TIMEOUT_S} s NCCL, {GLOO_TIMEOUT_S} s gloo), then "
            f"`distvlog diff` after the kill: {time.perf_counter() - t0:.2f} s"
        )
    request = tmp_stat_cost()
    print(f"stacks handler: one stat() a second per rank: {request * 1e6:.1f} µs/s ({request * 100:.5f}% of a core)")


def tmp_stat_cost() -> float:
    """Seconds one stat() of a missing request file takes (the handler's whole cost while no one asks)."""
    path = Path(tempfile.gettempdir()) / "distvlog-bench-no-such-request"
    n = 100_000
    t0 = time.perf_counter()
    for _ in range(n):
        with contextlib.suppress(OSError):
            os.stat(path)
    return (time.perf_counter() - t0) / n


if __name__ == "__main__":
    main()
