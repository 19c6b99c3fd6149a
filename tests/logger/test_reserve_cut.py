"""No reserve (the NUL bytes of the mapped window not yet written) is left at the end of a rank file for
long: a rank that a catchable signal ends (SIGTERM, also as plain `mpirun` forwards it) cuts its own before
it dies; the reserve of one killed beyond any handler's reach (SIGKILL: Hydra's, when another rank dies or
aborts, or the OOM killer's) is cut by the next run in the same log root, but never while its writer may be
alive. Real processes, real signals, real `mpirun` ranks (the mpich wheel's Hydra)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from logger_testkit import finish, read_glog, wait_for_line

from distvlog.launch.command import find_launcher, launcher_kind, mpi_command

TICKING = """
import time
import distvlog as dv
log = dv.get_logger("job")
for i in range(100):
    log.info("step", i=i)
log.info("last words")
print("ready", flush=True)
while True:
    time.sleep(0.01)  # in Python: handlers run at once
"""
BLOCKED_IN_C = """
from mpi4py import MPI
import distvlog as dv
log = dv.get_logger("job")
for i in range(100):
    log.info("step", i=i)
log.info("last words")
print("ready", flush=True)
MPI.COMM_SELF.recv(source=0)  # no one sends: blocked in C for good
"""


def _mpirun(n: int, script: Path) -> list[str]:
    launcher = find_launcher(None)
    return mpi_command(launcher, launcher_kind(launcher), n, {}, None) + [sys.executable, str(script)]


@pytest.mark.parametrize(
    "code, rc",
    [(TICKING, -signal.SIGTERM), (BLOCKED_IN_C, 128 + signal.SIGTERM)],
    ids=["in-python", "blocked-in-c"],
)
def test_a_process_a_sigterm_ends_leaves_no_reserve(scripts, code, rc):
    """Its handler (or, while the main thread is blocked in C, the signal watcher) cuts the reserve before
    the process dies as SIGTERM would have it: by the signal itself, or with status 128+15."""
    proc = scripts.start(code, env={"DISTVLOG_FLUSH_INTERVAL": "3600"})
    wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGTERM)
    returncode, _, err = finish(proc)
    assert returncode == rc, err
    data = scripts.only_file().read_bytes()
    assert b"\0" not in data and data.endswith(b"\n")
    assert [r.first for r in read_glog(scripts.only_file()).records][:101] == [f"step i={i}" for i in range(100)] + [
        "last words"
    ]


MPI_TICKING = """
import time
import distvlog as dv
from mpi4py import MPI
dv.init()
log = dv.get_logger("job")
for i in range(100):
    log.info("step", i=i)
MPI.COMM_WORLD.Barrier()
if dv.get_rank() == 0:
    print("ready", flush=True)
while True:
    time.sleep(0.01)
"""


def test_ranks_that_plain_mpirun_forwards_a_sigterm_to_leave_no_reserve(scripts):
    """Hydra forwards a SIGTERM sent to mpirun to every rank and SIGKILLs the others as soon as the first
    rank dies of it: each rank cuts its reserve in its handler, before it holds on for its peers."""
    script = scripts.write(MPI_TICKING)
    proc = subprocess.Popen(
        _mpirun(2, script),
        env=scripts.env(),
        cwd=scripts.tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGTERM)
    returncode, _, err = finish(proc)
    assert returncode != 0, err
    files = scripts.files()
    assert [p.name for p in files] == ["rank-0.log", "rank-1.log"]
    for path in files:
        data = path.read_bytes()
        assert b"\0" not in data and data.endswith(b"\n"), path
        steps = [r.first for r in read_glog(path).records if r.first.startswith("step")]
        assert steps == [f"step i={i}" for i in range(100)]
