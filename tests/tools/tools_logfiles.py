"""Log files for the timeline tools' tests: real rank files from our logger in several processes, and
synthetic files in our format (exact timestamps and clock offsets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from distvlog.format import VERSION

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
T0 = 1_796_004_674_000_000  # 2026-11-30 02:11:14 UTC, in µs

# Each rank: 3 threads log plain, multi-line, warning and VLOG records tagged r<rank>t<thread>i<i>.
WRITER = r"""
import sys, threading
import distvlog.logger as dlog
log = dlog.get_logger("writer")
rank, n = dlog.IDENTITY.rank, int(sys.argv[1])
def work(t):
    for i in range(n):
        tag = f"r{rank}t{t}i{i}"
        if i % 5 == 0:
            log.info(f"multi {tag}\n  second line of {tag}\n  third line of {tag}", step=i)
        elif i % 13 == 0:
            log.warning(f"warn {tag}", node=f"mul{i % 3}GradNode", norm=float("-inf"))
        else:
            log.vlog(4, f"plain {tag}", node=f"add{i % 4}GradNode", step=i)
threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
for t in threads: t.start()
for t in threads: t.join()
dlog.flush()
"""
WRITER_RECORDS = 3  # threads per rank


def write_run(root: Path, run_id: str, ranks: int, n: int, fmt: str = "glog") -> Path:
    """Run WRITER as `ranks` processes (PMI_RANK/PMI_SIZE), all at once; returns the run directory."""
    procs = []
    for rank in range(ranks):
        env = dict(
            os.environ,
            PMI_RANK=str(rank),
            PMI_SIZE=str(ranks),
            DISTVLOG_LOG_DIR=str(root),
            DISTVLOG_RUN_ID=run_id,
            DISTVLOG_FORMAT=fmt,
            DISTVLOG_V="4",
            PYTHONPATH=str(ROOT),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(n)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
    assert [p.wait(timeout=120) for p in procs] == [0] * ranks
    return root / run_id


def expected_tags(ranks: int, n: int) -> set[str]:
    return {f"r{r}t{t}i{i}" for r in range(ranks) for t in range(WRITER_RECORDS) for i in range(n)}


def stamp(us: int) -> str:
    """glog's `mmdd hh:mm:ss.uuuuuu` for epoch µs, in UTC."""
    return time.strftime("%m%d %H:%M:%S", time.gmtime(us // 10**6)) + f".{us % 10**6:06d}"


def ours(
    rank: int,
    records: list[tuple[int, str]],
    clock: tuple[str, str] = ("0.0 0.0 0", ""),
    world: int = 4,
    host: str = "node",
    pid: int | None = None,
    run_id: str = "synthetic",
    version: int = VERSION,
) -> str:
    """A rank file in our glog format; records are (epoch µs on this rank's clock, 'S message'), the message
    with its fields as written; a multi-line one declares its continuation lines (`+lines`) from version 2."""
    created = records[0][0] if records else T0
    meta = {
        "distvlog": version,
        "format": "glog",
        "rank": rank,
        "world_size": world,
        "host": host,
        "pid": 100 + rank if pid is None else pid,
        "tid": 100 + rank,
        "run_id": run_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created // 10**6)),
        "created_us": created,
        "utc_offset_s": 0,
        "clock_start": clock[0].ljust(64),
        "clock_end": clock[1].ljust(64),
    }
    lines = [
        f"Log file created at: {time.strftime('%Y/%m/%d %H:%M:%S', time.gmtime(created // 10**6))}",
        f"Running on machine: {host}",
        "Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg",
        f"I{stamp(created)} {100 + rank} distvlog:0] [rank {rank}] distvlog-meta {json.dumps(meta, separators=(',', ':'))}",
    ]
    for ts, text in records:
        sev, _, message = text.partition(" ")
        first, *more = message.split("\n")
        count = f" +lines={len(more)}" if more and version >= 2 else ""
        lines.append("\n".join([f"{sev}{stamp(ts)} {100 + rank} t.py:1] [rank {rank}] {first}{count}", *more]))
    return "\n".join(lines) + "\n"
