"""`distvlog launch` at the edges of a rank's life: a fork pool inside a rank, a job MPI aborts (the other
ranks' files trimmed, the failure's text safe for a terminal)."""

from __future__ import annotations

import re

import pytest
from launch_testkit import run_dir_of

pytestmark = pytest.mark.timeout(300)

POOL = """
import signal, time
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
BEFORE = [signal.getsignal(s) for s in SIGNALS]  # as Python set them, before distvlog
import multiprocessing as mp, os
import distvlog as dv

log = dv.get_logger()
log.info("before the pool")  # the rank's file opens: distvlog's handlers are installed in the rank

def check():  # the worker's handlers as it starts (before it logs, which installs them for itself)
    with open(f"worker-{os.getpid()}", "w") as out:
        out.write(str([signal.getsignal(s) for s in SIGNALS] == BEFORE))

def work(x):
    log.info("in a worker", x=x)  # a worker that logs does so as itself, into its own file
    return x * x

if __name__ == "__main__":
    t0 = time.monotonic()
    with mp.get_context("fork").Pool(2, initializer=check) as pool:  # its exit terminates them: SIGTERM
        total = sum(pool.map(work, range(8)))
    print(f"rank {dv.get_rank()}: {total}; the pool took {time.monotonic() - t0:.2f} s", flush=True)
    log.info("after the pool")
"""


def test_a_fork_pool_inside_a_launched_rank_keeps_its_signals(run_cli, tmp_path):
    """A pool's workers start with Python's own signal handling, not the rank's; terminated by the pool
    (SIGTERM), they log no rank's death and do not hold their exit (a rank that SIGTERM ends waits 1 s for
    its peers; the pool took 1.02 s instead of 0.02 s)."""
    (tmp_path / "pool.py").write_text(POOL)
    proc = run_cli("launch", "-n", "2", "pool.py")
    assert proc.returncode == 0, proc.stderr
    assert sorted(re.findall(r"^rank (\d): 140;", proc.stdout, re.M)) == ["0", "1"], proc.stdout
    workers = sorted(tmp_path.glob("worker-*"))  # (a worker the pool terminated before it started writes none)
    assert 2 <= len(workers) <= 4 and {w.read_text() for w in workers} == {"True"}
    run_dir = run_dir_of(proc)
    files = {p.name: p.read_text() for p in run_dir.glob("rank-*.log")}
    assert "rank-0.log" in files and "rank-1.log" in files
    assert len(files) > 2  # the workers' own files, rank-R.<pid>.log
    assert sum(text.count("] in a worker x=") for text in files.values()) == 16
    assert not [name for name, text in files.items() if "SIGTERM" in text]
    assert "SIGTERM" not in proc.stderr


ABORTED = """
import time
import distvlog as dv

dv.get_logger().info("started")
if dv.get_rank() == 1:
    raise RuntimeError("bad \\x1b[31mred\\x1b]0;title\\x07 \\x9bthe end")
time.sleep(60)  # the others: ended by MPI's abort, with SIGKILL
"""


def test_an_aborted_jobs_files_read_as_text_and_its_failure_is_safe_for_a_terminal(run_cli, tmp_path):
    """Rank 1 raises; MPI aborts the job and kills the others. Every rank file is text (no NUL reserve left:
    `grep` reads it), and launch's own lines show the message's control characters escaped."""
    (tmp_path / "aborted.py").write_text(ABORTED)
    proc = run_cli("launch", "-n", "3", "aborted.py")
    assert proc.returncode == 1, proc.stderr
    ours = [line for line in proc.stderr.splitlines() if line.startswith("distvlog launch:")]
    failed = next(line for line in ours if "failed: RuntimeError" in line)
    assert "bad \\x1b[31mred\\x1b]0;title\\x07 \\x9bthe end" in failed, failed
    assert not [line for line in ours if re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", line)], ours
    files = sorted(run_dir_of(proc).glob("rank-*.log"))
    assert len(files) == 3
    for path in files:
        data = path.read_bytes()
        assert b"\0" not in data and b"] started" in data, (path, data[-200:])
