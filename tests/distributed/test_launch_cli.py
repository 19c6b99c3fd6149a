"""`distvlog launch` end to end: real ranks, the example training script, a failing rank, bad input."""

from __future__ import annotations

import re
import signal
import subprocess
import time

import pytest
from launch_testkit import TRAIN, losses, run_dir_of

pytestmark = pytest.mark.timeout(300)

FAILING = """
import time
import distvlog as dv
from mpi4py import MPI

dv.init()
log = dv.get_logger("job")
log.info("started")
if dv.get_rank() == 1:
    time.sleep(0.2)
    raise ValueError("boom on rank 1")
log.info("waiting for rank 1")
MPI.COMM_WORLD.Barrier()
"""


def test_train_on_four_ranks(run_cli):
    proc = run_cli("launch", "-n", "4", TRAIN, "--steps", "12")
    assert proc.returncode == 0, proc.stderr
    found = losses(proc.stdout)
    assert len(found) == 12 and found[-1] < found[0] * 0.8, proc.stdout
    assert re.search(r"parameters bit-identical on all 4 ranks: digest [0-9a-f]{32}", proc.stdout)
    run_dir = run_dir_of(proc)
    assert sorted(p.name for p in run_dir.glob("rank-*")) == [f"rank-{r}.log" for r in range(4)]
    timeline = (run_dir / "timeline.log").read_text()
    assert f"distvlog launch: timeline: {run_dir}/timeline.log" in proc.stderr
    assert all(f"] [rank {r}] allreduce end v=1 step=11 bucket=0" in timeline for r in range(4))
    rank2 = (run_dir / "rank-2.log").read_text()
    assert re.search(r"allreduce begin v=1 step=11 bucket=0 bytes=\d+", rank2)
    assert "grad_stats node=linear" in rank2  # the guarded layer logs at level 5


def test_train_on_two_ranks_with_sgd_and_overlap(run_cli):
    proc = run_cli("launch", "-n", "2", TRAIN, "--steps", "8", "--optimizer", "sgd", "--overlap", "--guard-level", "0")
    assert proc.returncode == 0, proc.stderr
    assert "parameters bit-identical on all 2 ranks" in proc.stdout
    assert "grad_stats" not in (run_dir_of(proc) / "rank-0.log").read_text()


def test_a_failing_rank_aborts_the_job_and_is_named(run_cli, tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(FAILING)
    proc = run_cli("launch", "-n", "4", str(script))
    assert proc.returncode != 0
    assert "distvlog launch: rank 1 failed: ValueError: boom on rank 1 (fail.py:11)" in proc.stderr
    run_dir = run_dir_of(proc)
    assert re.search(r"^(\w)\S+ .*Unhandled exception", (run_dir / "rank-1.log").read_text(), re.M).group(1) == "F"
    timeline = (run_dir / "timeline.log").read_text()
    for rank in (0, 2, 3):  # killed while waiting for rank 1, their records are on disk and merged all the same
        assert "waiting for rank 1" in (run_dir / f"rank-{rank}.log").read_text()
        assert f"[rank {rank}] waiting for rank 1" in timeline


EXITING = """
import sys
import distvlog as dv
from mpi4py import MPI

dv.init()
if dv.get_rank() == 1:
    {exit}
MPI.COMM_WORLD.Barrier()
"""


@pytest.mark.parametrize(
    "call, reason",
    [
        ("sys.exit('rank 1: config file missing')", "exited with status 1: rank 1: config file missing"),
        ("sys.exit(3)", "exited with status 3"),
    ],
)
def test_a_rank_that_exits_non_zero_is_named_with_its_reason(run_cli, tmp_path, call, reason):
    script = tmp_path / "exits.py"
    script.write_text(EXITING.format(exit=call))
    proc = run_cli("launch", "-n", "2", str(script))
    assert proc.returncode != 0
    assert f"distvlog launch: rank 1 failed: {reason} (exits.py:8)" in proc.stderr
    assert "no rank logged" not in proc.stderr
    assert re.search(
        rf"^F\S+ \S+ \d+ exits.py:8\] \[rank 1\] {re.escape(reason)}$",
        (run_dir_of(proc) / "rank-1.log").read_text(),
        re.M,
    )


def test_a_script_that_never_logs_keeps_its_exit_code(run_cli, tmp_path):
    script = tmp_path / "quiet.py"
    script.write_text("print('hello from a rank')\n")
    proc = run_cli("launch", "-n", "2", str(script))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("hello from a rank") == 2
    assert "no rank wrote a log file" in proc.stderr and "nothing to merge" in proc.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["-n", "2", "no_such_script.py"], "script no_such_script.py: no such file"),
        (["-n", "0", TRAIN], "-n 0: need at least one rank"),
        (["-n", "2", "--mpirun", "no-such-mpirun", TRAIN], "--mpirun no-such-mpirun: not found"),
        (["-n", "2", "--hostfile", "no_such_hosts", TRAIN], "--hostfile no_such_hosts: no such file"),
        (["-n", "2", "/"], "script /: a directory"),
        (["-n", "2", "--log-dir", TRAIN, TRAIN], f"--log-dir {TRAIN}: not a directory"),  # checked before the job
    ],
)
def test_bad_input_is_one_line_and_exit_2(run_cli, args, message):
    proc = run_cli("launch", *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"distvlog launch: error: {message}"), proc.stderr


HUNG = """
import distvlog as dv
from mpi4py import MPI

dv.init()
dv.get_logger("job").info("before the hang")
print("ready", flush=True)
if dv.get_rank() == 1:
    MPI.COMM_WORLD.recv(source=0)  # @recv: blocked in C, as rank 0 is
MPI.COMM_WORLD.Barrier()  # @barrier
"""


def _line(code: str, marker: str) -> int:
    return next(i for i, line in enumerate(code.splitlines(), start=1) if marker in line)


def test_a_hung_job_stopped_by_sigterm_keeps_its_logs_and_says_where_ranks_were(start_cli, tmp_path):
    """Ranks blocked in MPI never return to Python, where signal handlers run: a watcher thread flushes and
    logs where its rank is at once and, after a grace period, ends it. A SIGTERM to `distvlog launch`
    (timeout, a scheduler) reaches the ranks through the launcher, and the run is merged all the same."""
    script = tmp_path / "hung.py"
    script.write_text(HUNG)
    proc = start_cli("launch", "-n", "2", str(script), env={"DISTVLOG_FLUSH_INTERVAL": "3600"})  # no timer flush
    assert [proc.stdout.readline() for _ in range(2)] == ["ready\n"] * 2
    time.sleep(0.5)  # (not a speed limit: lets both ranks enter their MPI calls)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    run_dir = run_dir_of(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    timeline = (run_dir / "timeline.log").read_text()
    assert "[rank 0] before the hang" in timeline and "[rank 1] before the hang" in timeline

    def located(severity: str, message: str) -> dict[int, int]:
        pattern = rf"^{severity}\S+ \S+ \d+ hung\.py:(\d+)\] \[rank (\d+)\] {message}"
        return {int(rank): int(line) for line, rank in re.findall(pattern, timeline, re.M)}

    at = located("W", "SIGTERM arrived while the main thread was blocked in C")  # each rank, at once
    assert at == {0: _line(HUNG, "@barrier"), 1: _line(HUNG, "@recv")}, timeline
    ended = located("F", "SIGTERM: the main thread did not return")  # the first to end has the other killed
    assert ended and ended.items() <= at.items(), timeline
    assert re.search(r"rank [01] failed: SIGTERM: the main thread did not return to Python within \d+ s", err), err


KILLED = """
import os, signal
import numpy as np
import distvlog as dv

dv.init()
model = dv.DataParallel(dv.nn.Linear(4, 2))
log = dv.get_logger("job")
x = dv.to_tensor(np.ones((3, 4), "float32"))
for step in range(3):
    if step == 2 and dv.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # as a segfault or the OOM killer would
    log.info("before backward", step=step)
    model(x).sum().backward()  # rank 0 waits in the allreduce of step 2 for a rank that is gone
"""


def test_the_records_of_ranks_killed_while_waiting_for_a_dead_rank_are_on_disk(run_cli, tmp_path):
    """The launcher kills the ranks left waiting with SIGKILL, which no handler sees: the engine flushes
    before DataParallel's wait, so everything they logged up to it is in their files."""
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    proc = run_cli("launch", "-n", "2", str(script), env={"DISTVLOG_FLUSH_INTERVAL": "3600"})  # no timer flush
    assert proc.returncode != 0
    assert "before backward step=2" in (run_dir_of(proc) / "rank-0.log").read_text()
