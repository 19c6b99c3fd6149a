"""A process's first record (it creates the rank file and cuts the reserves earlier runs left) in an empty log
root beside the same in a root of many runs, the latest three of them killed with their reserves. Same run.

Each round starts a fresh process per root and times its first log call; the killed runs' files get their
reserves back before every round. Rounds alternate; medians are reported.

    python benchmarks/bench_first_record.py [--rounds 21] [--runs 1000] [--ranks 4]
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

ROOT = Path(__file__).resolve().parents[1]
FIRST_RECORD = """
import time
import distvlog.logger as dlog
log = dlog.get_logger("bench")
t0 = time.perf_counter()
log.info("first")
print(time.perf_counter() - t0)
"""
KILLED = """
import time
import distvlog.logger as dlog
log = dlog.get_logger("bench")
for i in range(1000):
    log.info("step", i=i)
print("ready", flush=True)
time.sleep(600)
"""


def first_record_s(root: Path, env: dict[str, str]) -> float:
    out = subprocess.run(
        [sys.executable, "-c", FIRST_RECORD], env={**env, "DISTVLOG_LOG_DIR": str(root)}, capture_output=True, text=True
    )
    return float(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--ranks", type=int, default=4)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "PMI_", "OMPI_"))}
    env["PYTHONPATH"] = str(ROOT)
    tmp = Path(tempfile.mkdtemp(prefix="bench_first_record."))
    try:
        empty, full = tmp / "empty", tmp / "full"
        empty.mkdir()
        killed: list[tuple[Path, bytes]] = []
        for k in range(args.runs):
            run = full / f"run{k:05d}"
            run.mkdir(parents=True)
            for r in range(args.ranks):
                (run / f"rank-{r}.log").write_bytes(b"x\n" * 4096)  # a settled file: no reserve
        procs = [  # the latest three runs, alive together (none cuts another's reserve), then killed
            subprocess.Popen(
                [sys.executable, "-c", KILLED], env={**env, "DISTVLOG_LOG_DIR": str(full)}, stdout=subprocess.PIPE
            )
            for _ in range(3)
        ]
        for proc in procs:
            proc.stdout.readline()
        for proc in procs:
            proc.kill()
            proc.wait()
        for path in full.glob("*/rank-0.log"):
            data = path.read_bytes()
            if data.endswith(b"\0") and path.parent.name != "latest":
                killed.append((path, data))
        assert len(killed) == 3, [path for path, _ in killed]
        kept = set(full.iterdir())
        times: dict[str, list[float]] = {"empty root": [], f"{args.runs} runs, 3 killed": []}
        for _ in range(args.rounds):
            for path, data in killed:
                path.write_bytes(data)
                os.utime(path.parent, (time.time(), time.time()))  # still the latest
            times["empty root"].append(first_record_s(empty, env))
            times[f"{args.runs} runs, 3 killed"].append(first_record_s(full, env))
            for path, _ in killed:
                assert not path.read_bytes().endswith(b"\0"), path
            for new in [*empty.iterdir(), *(set(full.iterdir()) - kept)]:  # (each root as it was)
                if new.is_dir() and not new.is_symlink():
                    shutil.rmtree(new)
                else:
                    new.unlink()
        medians = {name: statistics.median(t) for name, t in times.items()}
        for name, m in medians.items():
            print(f"{name:24s} first record median {m * 1000:7.2f} ms   (min {min(times[name]) * 1000:.2f} ms)")
        base, loaded = medians.values()
        print(f"ratio: {loaded / base:.2f}x the empty root's; {1000 * (loaded - base):.2f} ms more")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
