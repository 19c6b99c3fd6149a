"""How far healthy runs go on each statistic `distvlog diff` judges: the data behind its thresholds.

    python benchmarks/study_healthy.py [--runs 64] [--steps 200] [--out study.jsonl] [--summary-only]

Runs `launch/train.py` without any fault over a matrix of configurations (2 to 16 ranks, SGD and Adam,
overlap on and off, guard levels 5 and 6, digits and synthetic data, batch 8 and 32, a seed per run),
then `distvlog diff --json` on each, and prints, per statistic, the largest value any run reached (the
statistic of a run is its largest over all ranks, steps and gradients) beside the threshold in
`distvlog/tools/diff/_thresholds.py`. A healthy run must never reach a threshold: any error on one of these
runs is a false alarm, printed with its configuration. Results go to --out, a line per run, so a second
call with --summary-only reprints the table (the runs take minutes: 16 ranks share this machine's cores).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from distvlog.tools.diff import _thresholds as T  # noqa: E402

STATISTICS = {  # statistic -> the threshold it must stay below (None: shown, not judged)
    "explosion": T.EXPLOSION,
    "explosion (note)": T.NOTE_SPIKE,
    "straggler": T.STRAGGLER,
    "spread_from_peers": None,
}
MATRIX = {  # (the last cycles fastest)
    "guard_level": (5, 6),
    "overlap": (False, True),
    "data": ("digits", "synthetic"),
    "optimizer": ("sgd", "adam"),
    "batch_size": (32, 8),
    "ranks": (2, 4, 8, 16),
}


def configurations(runs: int, steps: int) -> list[dict]:
    """The first `runs` of the matrix (each dimension cycling at its own pace), a seed each; ranks 3, 6 and 12
    replace 2, 4 and 8 on the second pass through the matrix."""
    grid = list(itertools.product(*MATRIX.values()))
    out = []
    for i in range(runs):
        config = dict(zip(MATRIX, grid[i % len(grid)]))
        if i // len(grid) % 2:
            config["ranks"] = {2: 3, 4: 6, 8: 12}.get(config["ranks"], config["ranks"])
        out.append({**config, "seed": i, "steps": steps})
    return out


def has_digits() -> bool:
    return subprocess.run([sys.executable, "-c", "import sklearn"], capture_output=True).returncode == 0


def run_one(config: dict, tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_"))}
    env.update(PYTHONPATH=str(REPO), DISTVLOG_LOG_DIR=str(tmp / f"logs-{config['seed']}"))
    args = [
        "--steps",
        str(config["steps"]),
        "--seed",
        str(config["seed"]),
        "--optimizer",
        config["optimizer"],
        "--guard-level",
        str(config["guard_level"]),
        "--data",
        config["data"],
        "--batch-size",
        str(config["batch_size"]),
    ] + (["--overlap"] if config["overlap"] else [])
    started = time.perf_counter()
    job = subprocess.run(
        [
            sys.executable,
            "-m",
            "distvlog",
            "launch",
            "-n",
            str(config["ranks"]),
            str(REPO / "launch" / "train.py"),
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    if job.returncode:
        return {**config, "job_failed": job.stderr[-2000:]}
    diff = subprocess.run(
        [sys.executable, "-m", "distvlog", "diff", "--json", env["DISTVLOG_LOG_DIR"]],
        env=env,
        capture_output=True,
        text=True,
    )
    report = json.loads(diff.stdout)
    subprocess.run(["rm", "-rf", env["DISTVLOG_LOG_DIR"]])
    return {
        **config,
        "seconds": round(seconds, 1),
        "exit_code": diff.returncode,
        "largest": report["largest"],
        "errors": report["errors"],
        "notes": [n["kind"] for n in report["notes"]],
    }


def summary(results: list[dict]) -> None:
    ok = [r for r in results if "largest" in r]
    print(
        f"{len(ok)} healthy runs ({sum(r['ranks'] for r in ok)} rank-runs, "
        f"{sum(r['ranks'] * r['steps'] for r in ok):,} rank-steps)"
    )
    for label, threshold in STATISTICS.items():
        name = label.split()[0]
        values = sorted(r["largest"][name] for r in ok)
        if not values:
            continue
        top = max(ok, key=lambda r: r["largest"][name])
        judged = f"  threshold {threshold:8.3g}  margin {threshold / values[-1]:6.3g}x" if threshold else ""
        print(
            f"  {label:20s} median {statistics.median(values):8.3g}  p90 {values[int(0.9 * (len(values) - 1))]:8.3g}"
            f"  max {values[-1]:8.3g}{judged}  (max at ranks={top['ranks']} {top['optimizer']} batch "
            f"{top['batch_size']} {top['data']} seed {top['seed']})"
        )
    for r in ok:
        if r["exit_code"] or r["errors"]:
            print(f"  FALSE ALARM: {json.dumps({k: v for k, v in r.items() if k != 'largest'})}")
    notes = sum(len(r["notes"]) for r in ok)
    print(f"  notes: {notes} in {sum(bool(r['notes']) for r in ok)} runs")
    for r in results:
        if "job_failed" in r:
            print(f"  JOB FAILED: {r}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--out", default="study_healthy.jsonl")
    p.add_argument("--summary-only", action="store_true")
    args = p.parse_args()
    out = Path(args.out)
    if not args.summary_only:
        digits = has_digits()
        with tempfile.TemporaryDirectory() as tmp, out.open("a") as f:
            for config in configurations(args.runs, args.steps):
                if config["data"] == "digits" and not digits:
                    config["data"] = "synthetic"
                result = run_one(config, Path(tmp))
                f.write(json.dumps(result) + "\n")
                f.flush()
                print(json.dumps({k: v for k, v in result.items() if k not in ("errors",)}), flush=True)
    summary([json.loads(line) for line in out.read_text().splitlines() if line.strip()])


if __name__ == "__main__":
    main()
