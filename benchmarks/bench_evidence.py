"""Reading other programs' evidence: Flight Recorder dumps through `distvlog merge` and `diff`, beside torch's
analyzer (fr_trace) on the same dumps; and what finding evidence costs when PATH is one of our run directories.

The dumps are generated in the schema torch 2.13 writes (version "2.10", pickle with Python frames), one
per rank, `--entries` collectives each (2,000: the default buffer), every rank the same collectives except
the last rank, which is one short (a hang). Their `pg_config` is keyed as NCCL keys it, so that fr_trace
runs (on gloo's own dumps it dies with KeyError). Each command runs once per round under GNU time: wall
seconds, CPU seconds and peak RSS. The run directory for the detection cost holds `--ranks` rank files of
our format: the search for evidence beside them (`find`, which sniffs no file of ours: their names say
what they are) is timed against the whole of `resolve_inputs` on it. Opening and reading our files is
unchanged: no byte of them is sniffed.

    python benchmarks/bench_evidence.py [--dumps 1024] [--entries 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from distvlog.tools.read import resolve_inputs  # noqa: E402
from distvlog.tools.read._evidence import find  # noqa: E402  (the part resolve_inputs added for evidence)

GNU_TIME = shutil.which("time")
START_NS = 1_796_004_674_000_000_000
FRAMES = [
    {"name": "all_reduce", "filename": "/site/torch/distributed/distributed_c10d.py", "line": 3245},
    {"name": "wrapper", "filename": "/site/torch/distributed/c10d_logger.py", "line": 83},
    {"name": "train_step", "filename": "/job/train.py", "line": 120},
    {"name": "main", "filename": "/job/train.py", "line": 200},
]


def dump(rank: int, world: int, entries: int) -> dict:
    n = entries - (rank == world - 1)
    return {
        "version": "2.10",
        "comm_lib_version": "2.21.5",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
        "pg_status": {
            "0": {"last_enqueued_collective": n, "last_started_collective": n, "last_completed_collective": n - 1}
        },
        "entries": [
            {
                "record_id": i,
                "pg_id": 0,
                "process_group": ("0", "default_pg"),
                "collective_seq_id": i + 1,
                "p2p_seq_id": 0,
                "op_id": i + 1,
                "profiling_name": "nccl:all_reduce",
                "time_created_ns": START_NS + i * 1_000_000 + rank * 1000,
                "input_sizes": [[1024, 1024]],
                "input_dtypes": ["Float"],
                "output_sizes": [[1024, 1024]],
                "output_dtypes": ["Float"],
                "state": "completed" if i < n - 1 else "started",
                "time_discovered_started_ns": START_NS + i * 1_000_000 + rank * 1000 + 500,
                "time_discovered_completed_ns": START_NS + i * 1_000_000 + rank * 1000 + 900 if i < n - 1 else None,
                "retired": i < n - 1,
                "timeout_ms": 600000,
                "is_p2p": False,
                "thread_id": "140314487049088",
                "thread_name": "pt_main_thread",
                "frames": FRAMES,
            }
            for i in range(n)
        ],
    }


def timed(cmd: list[str], out: Path) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS KiB) of a command; exit status 1 (a finding) counts as success."""
    rss_file = out.with_name("rss")
    t0 = time.perf_counter()
    with open(out, "wb") as stdout:
        done = subprocess.run(
            [GNU_TIME, "-f", "%M %U %S", "-o", str(rss_file), *cmd] if GNU_TIME else cmd,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            stdout=stdout,
            stderr=subprocess.PIPE,
        )
    wall = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        raise SystemExit(f"{cmd[:4]} failed: {done.stderr.decode()[-2000:]}")
    rss, user, system = rss_file.read_text().split()[-3:] if GNU_TIME else ("0", "0", "0")
    return wall, float(user) + float(system), int(rss)


def detection(tmp: Path, ranks: int, rounds: int) -> None:
    run = tmp / "run"
    run.mkdir()
    for r in range(ranks):
        (run / f"rank-{r}.log").write_text("Log file created at: 2026/12/05 10:00:00\n")
    search, whole = [], []
    for _ in range(rounds * 20):
        t0 = time.perf_counter()
        find(run)
        search.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        resolve_inputs([str(run)])
        whole.append(time.perf_counter() - t0)
    print(
        f"run directory of {ranks} rank files: the search for evidence {statistics.median(search) * 1e3:.2f} ms "
        f"of resolve_inputs' {statistics.median(whole) * 1e3:.2f} ms (medians)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dumps", type=int, default=1024)
    p.add_argument("--entries", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ranks", type=int, default=1024, help="rank files in the run directory (detection cost)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        dumps = tmp / "dumps"
        dumps.mkdir()
        for rank in range(args.dumps):
            (dumps / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump(rank, args.dumps, args.entries)))
        size = sum(f.stat().st_size for f in dumps.iterdir())
        print(f"{args.dumps} dumps x {args.entries} entries ({size / 1e6:.0f} MB of pickle)")
        contenders = {
            "distvlog merge": [sys.executable, "-m", "distvlog", "merge", str(dumps)],
            "distvlog diff": [sys.executable, "-m", "distvlog", "diff", str(dumps)],
            "fr_trace": [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(dumps)],
        }
        results: dict[str, list] = {k: [] for k in contenders}
        for _ in range(args.rounds):
            for label, cmd in contenders.items():
                results[label].append(timed(cmd, tmp / "out"))
        for label, runs in results.items():
            wall, cpu, rss = (statistics.median(x) for x in zip(*runs))
            print(f"{label:15s} wall {wall:7.2f} s  cpu {cpu:7.2f} s  peak RSS {rss / 1024:6.0f} MB")
        diff = subprocess.run(contenders["distvlog diff"][:-1] + [str(dumps)], capture_output=True, text=True)
        print("diff says:", diff.stdout.splitlines()[1] if len(diff.stdout.splitlines()) > 1 else diff.stdout)
        detection(tmp, args.ranks, args.rounds)


if __name__ == "__main__":
    main()
