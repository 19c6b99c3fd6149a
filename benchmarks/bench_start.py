"""Start-up: `distvlog merge` of a small run (4 ranks x 100 records) beside `python -c pass`, same run.

Goal (issue 23): the small merge within 0.15 s of wall time on this machine; most of it is importing.
Contenders run interleaved, `--rounds` times each, in a new random order each round (a run's place in
the round changes its time on a loaded machine); medians of wall and CPU time are reported.

The merge is timed twice. "installed": with bytecode cached, as `pip install` leaves a package (the
caches live in a temporary PYTHONPYCACHEPREFIX, filled by a first run). "no .pyc": as a source checkout
runs under PYTHONDONTWRITEBYTECODE=1 (this machine's environment sets it), where every distvlog module is
compiled from source at every start. `--baseline TREE` times another checkout's merge (say /work/main)
in the same rounds, for a before/after.

    python benchmarks/bench_start.py [--rounds 21] [--baseline /work/main]
"""

from __future__ import annotations

import argparse
import os
import random
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


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system: the steadier figure on a machine shared with other work). `cwd`:
    not a checkout (`-m` and `-c` put the working directory first on sys.path, ahead of PYTHONPATH)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd)}: failed")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--baseline", metavar="TREE", type=Path, help="also time the merge of this checkout")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_start."))
    try:
        files = [str(tmp / f"rank-{r}.log") for r in range(RANKS)]
        for r, f in enumerate(files):
            generate(Path(f), r, RECORDS, seed=r, ranks=RANKS)
        merge = [sys.executable, "-m", "distvlog", "merge", *files, "-o", str(tmp / "out.log")]

        def env(tree: Path, cached: bool) -> dict[str, str]:
            out = dict(os.environ, PYTHONPATH=str(tree))
            out.pop("PYTHONDONTWRITEBYTECODE", None)
            if cached:
                out["PYTHONPYCACHEPREFIX"] = str(tmp / "pyc" / tree.name)
            else:
                out.pop("PYTHONPYCACHEPREFIX", None)
                out["PYTHONDONTWRITEBYTECODE"] = "1"
            return out

        runs = {
            "python -c pass": ([sys.executable, "-c", "pass"], env(ROOT, True)),
            'python -c "import numpy"': ([sys.executable, "-c", "import numpy"], env(ROOT, True)),
            "merge, installed": (merge, env(ROOT, True)),
            "merge, no .pyc": (merge, env(ROOT, False)),
        }
        if args.baseline:
            runs["baseline merge, installed"] = (merge, env(args.baseline.resolve(), True))
            runs["baseline merge, no .pyc"] = (merge, env(args.baseline.resolve(), False))
        if any(ROOT.glob("distvlog/**/__pycache__")):
            print("note: distvlog has __pycache__ directories: the no .pyc rows read them")
        for cmd, e in runs.values():  # fills the bytecode caches
            timed(cmd, e, tmp)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        order, shuffle = list(runs), random.Random(0).shuffle
        for _ in range(args.rounds):
            shuffle(order)
            for name in order:
                times[name].append(timed(*runs[name], tmp))
        medians = {name: [statistics.median(column) * 1000 for column in zip(*t)] for name, t in times.items()}
        wall0, cpu0 = medians["python -c pass"]
        print(f"{RANKS} ranks x {RECORDS} records, {args.rounds} rounds, medians (ms; over python -c pass):")
        print(f"  {'':28s} {'wall':>6s} {'over':>6s}  {'CPU':>6s} {'over':>6s}")
        for name, (wall, cpu) in medians.items():
            print(f"  {name:28s} {wall:6.1f} {wall - wall0:+6.1f}  {cpu:6.1f} {cpu - cpu0:+6.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
