"""Start-up: `distvlog merge` of a small run (4 ranks x 100 records) beside `python -c pass`, same run.

Goal (issue 23): the small merge within 0.15 s of wall time on this machine; most of it is importing.
Contenders run interleaved, `--rounds` times each; medians are reported, and what the merge imports.

    python benchmarks/bench_start.py [--rounds 21]
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

RANKS, RECORDS = 4, 100


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = str(ROOT)
    tmp = Path(tempfile.mkdtemp(prefix="bench_start."))
    try:
        files = [str(tmp / f"rank-{r}.log") for r in range(RANKS)]
        for r, f in enumerate(files):
            generate(Path(f), r, RECORDS, seed=r, ranks=RANKS)
        runs = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "distvlog merge": [sys.executable, "-m", "distvlog", "merge", *files, "-o", str(tmp / "out.log")],
            "import numpy": [sys.executable, "-c", "import numpy"],
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, cmd in runs.items():
                times[name].append(wall(cmd))
        for name, t in times.items():
            print(f"{name:16s} median {statistics.median(t) * 1000:6.1f} ms   (min {min(t) * 1000:.1f} ms)")
        merge, floor = statistics.median(times["distvlog merge"]), statistics.median(times["python -c pass"])
        print(
            f"distvlog merge of {RANKS} x {RECORDS} records: {merge * 1000:.0f} ms, {merge - floor:.3f} s over python"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
