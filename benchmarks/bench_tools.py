"""`distvlog trace` and `distvlog diff` at 256 ranks: records/s and peak RSS at two input sizes, same run.

The inputs are bench_merge's rank files (node begin records, grad_stats, 10% multi-line dumps; short
records), at `--records` and 4x that many per rank: time linear in the input shows as equal records/s;
memory bounded shows as equal peak RSS. `merge` runs beside them as the reference reader. Medians of
`--rounds` interleaved runs.

    python benchmarks/bench_tools.py [--ranks 256] [--records 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_merge import ROOT, generate  # noqa: E402


def run_one(cmd: list[str]) -> tuple[float, int, float]:
    """Wall seconds, peak RSS (KiB) and CPU seconds (user + system: the steadier figure on a shared machine)
    of one run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) not in (0, 1):  # diff: 1 is "found something"
        raise SystemExit(f"{cmd} failed: {err[-2000:]}")
    return wall, usage.ru_maxrss, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--records", type=int, default=2000, help="records per rank of the smaller input")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = str(ROOT)
    tmp = Path(tempfile.mkdtemp(prefix="bench_tools."))
    print(f"{'tool':6} {'records':>10} {'input':>8} {'median':>8} {'records/s':>11} {'peak RSS':>9}")
    try:
        for n in (args.records, 4 * args.records):
            run = tmp / f"run{n}"
            run.mkdir()
            size = sum(generate(run / f"rank-{r}.log", r, n, seed=r, ranks=args.ranks) for r in range(args.ranks))
            tools = {
                "merge": [sys.executable, "-m", "distvlog", "merge", str(run), "-o", os.devnull],
                "trace": [sys.executable, "-m", "distvlog", "trace", str(run), "-o", str(tmp / "t.json")],
                "diff": [sys.executable, "-m", "distvlog", "diff", str(run), "-o", os.devnull],
            }
            got: dict[str, list[tuple[float, int, float]]] = {name: [] for name in tools}
            for _ in range(args.rounds):
                for name, cmd in tools.items():
                    got[name].append(run_one(cmd))
            records = n * args.ranks
            for name, runs in got.items():
                wall = statistics.median(t for t, _, _ in runs)
                rss = max(r for _, r, _ in runs)
                print(
                    f"{name:6} {records:>10,} {size / 1e6:>6.0f}MB {wall:>7.2f}s {records / wall:>11,.0f} "
                    f"{rss / 1024:>7.0f}MB",
                    flush=True,
                )
            shutil.rmtree(run)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
