"""`distvlog diff RUN_A RUN_B` against the one-run `distvlog diff RUN_A`: wall time and peak RSS, same run.

Two synthetic runs of `launch/train.py`'s records (per rank and step: the parameter digests, the guarded
layer's six grad_stats, two buckets' allreduce begin and end, the loss), `--ranks` ranks x `--steps`
steps; run B departs within rounding from run A halfway (its gradients' norms 1e-7 apart, checksums and
later digests different), so the two-run diff compares every value and judges a departure. Goal: the
two-run diff within 2x the one-run diff of one of them (it reads twice the records). Medians of `--rounds`
interleaved runs.

    python benchmarks/bench_diff_runs.py [--ranks 16] [--steps 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_merge import ROOT, START_US, header_bytes  # noqa: E402
from bench_tools import run_one  # noqa: E402

NODES = (  # (node, slot, site) of one backward pass of the guarded layer, in the order it runs
    ("relu{}GradNode", "grad_out", "train.py:73"),
    ("relu{}GradNode", "grad_x", "train.py:73"),
    ("linear{}GradNode", "grad_out", "train.py:72"),
    ("linear{}GradNode", "grad_x", "train.py:72"),
    ("linear{}GradNode", "grad_weight", "train.py:72"),
    ("linear{}GradNode", "grad_bias", "train.py:72"),
)
PARAMS = ("linear_0.w_0", "linear_0.b_0", "linear_1.w_0", "linear_1.b_0", "linear_2.w_0", "linear_2.b_0")
STEP_US = 20_000


def _stamp(ts: int) -> str:
    seconds = ts // 10**6
    return f"I{time.strftime('%m%d %H:%M:%S', time.gmtime(seconds))}.{ts % 10**6:06d} {4000}"


def write_rank(path: Path, rank: int, ranks: int, steps: int, depart: int | None) -> None:
    """One rank file; from step `depart` on (None: never) its values are those of a run that departed."""
    lines = [header_bytes(rank, ranks, START_US, "0.0 0.0 0", "0.0 0.0 0").decode()]

    def line(ts: int, where: str, text: str) -> None:
        lines.append(f"{_stamp(ts)} {where}] [rank {rank}] {text}\n")

    line(
        START_US,
        "parallel.py:150",
        f"parameter layout v=1 names={list(PARAMS)!r} buckets=[[5,4,3,2,1],[0]]".replace("'", '"'),
    )
    for step in range(steps + 1):
        off = depart is not None and step >= depart  # its gradients from `depart`, its parameters after
        ts = START_US + (step + 1) * STEP_US
        salt = "b" if depart is not None and step > depart else "a"
        digests = ",".join(f'"{salt}{(step * 31 + i) % 10**15:015x}"' for i in range(len(PARAMS)))
        final = " final=True" if step == steps else ""
        line(ts, "parallel.py:206", f"parameters v=1 step={step} digests=[{digests}]{final}")
        if step == steps:
            break
        for i, (node, slot, site) in enumerate(NODES):
            norm = 0.1 + 0.01 * ((step * 7 + rank * 3 + i) % 17)
            norm *= 1 + 1e-7 if off else 1
            name = node.format(2 * step + 2)
            line(
                ts + 100 + i,
                "nodelog.py:259",
                f"grad_stats node={name} pass={step + 1} v=5 slot={slot} tensor=t@Grad site={site} shape=32x64 "
                f"dtype=float32 norm={norm!r} nan=0 inf=0 step={step}",
            )
        for bucket in (0, 1):
            checksum = f"{'f' if off else 'c'}{(step * 131 + rank * 7 + bucket) % 10**15:015x}"
            line(
                ts + 200,
                "parallel.py:257",
                f"allreduce begin v=1 step={step} bucket={bucket} bytes=19496 checksum={checksum} norm={1.0 + bucket!r}",
            )
            line(
                ts + 300,
                "parallel.py:290",
                f"allreduce end v=1 step={step} bucket={bucket} checksum={checksum[::-1]} wait_us=100",
            )
        loss = 2.0 / (1 + step) * (1 + 1e-7 if off else 1)
        line(ts + 400, "train.py:142", f"train step loss={loss!r} mean_loss={loss!r} step={step}")
    path.write_text("".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = str(ROOT)
    tmp = Path(tempfile.mkdtemp(prefix="bench_diff_runs."))
    try:
        runs = {"A": tmp / "a", "B": tmp / "b"}
        for name, run in runs.items():
            run.mkdir()
            for rank in range(args.ranks):
                write_rank(
                    run / f"rank-{rank}.log", rank, args.ranks, args.steps, args.steps // 2 if name == "B" else None
                )
        size = sum(p.stat().st_size for p in runs["A"].iterdir())
        diff = [sys.executable, "-m", "distvlog", "diff"]
        commands = {
            "diff RUN_A": [*diff, str(runs["A"]), "-o", os.devnull],
            "diff RUN_A RUN_B": [*diff, str(runs["A"]), str(runs["B"]), "-o", os.devnull],
        }
        got: dict[str, list[tuple[float, int, float]]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, cmd in commands.items():
                got[name].append(run_one(cmd))
        print(f"{args.ranks} ranks x {args.steps} steps, {size / 2**20:.1f} MiB a run, median of {args.rounds} rounds:")
        med = {name: [statistics.median(run[k] for run in v) for k in range(3)] for name, v in got.items()}
        for name, (wall, rss, cpu) in med.items():
            print(f"  {name:18s} {wall * 1e3:8.0f} ms ({cpu * 1e3:6.0f} ms CPU)  peak RSS {rss / 1024:6.1f} MiB")
        ratio, cpu = (
            statistics.median(b[k] / a[k] for a, b in zip(got["diff RUN_A"], got["diff RUN_A RUN_B"])) for k in (0, 2)
        )
        rss = med["diff RUN_A RUN_B"][1] / med["diff RUN_A"][1]
        print(f"two-run / one-run: {ratio:.2f}x time, {cpu:.2f}x CPU (goal <= 2x), {rss:.2f}x peak RSS")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
