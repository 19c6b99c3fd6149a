"""`distvlog launch` end to end: real ranks, the example training script, a failing rank, bad input."""

from __future__ import annotations

import re

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
    assert "F" == re.search(r"^(\w)\S+ .*Unhandled exception", (run_dir / "rank-1.log").read_text(), re.M).group(1)
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


@pytest.mark.parametrize("call, reason", [
    ("sys.exit('rank 1: config file missing')", "exited with status 1: rank 1: config file missing"),
    ("sys.exit(3)", "exited with status 3"),
])
def test_a_rank_that_exits_non_zero_is_named_with_its_reason(run_cli, tmp_path, call, reason):
    script = tmp_path / "exits.py"
    script.write_text(EXITING.format(exit=call))
    proc = run_cli("launch", "-n", "2", str(script))
    assert proc.returncode != 0
    assert f"distvlog launch: rank 1 failed: {reason} (exits.py:8)" in proc.stderr
    assert "no rank logged" not in proc.stderr
    assert re.search(rf"^F\S+ \S+ \d+ exits.py:8\] \[rank 1\] {re.escape(reason)}$",
                     (run_dir_of(proc) / "rank-1.log").read_text(), re.M)


def test_a_script_that_never_logs_keeps_its_exit_code(run_cli, tmp_path):
    script = tmp_path / "quiet.py"
    script.write_text("print('hello from a rank')\n")
    proc = run_cli("launch", "-n", "2", str(script))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("hello from a rank") == 2
    assert "no rank wrote a log file" in proc.stderr and "nothing to merge" in proc.stderr


@pytest.mark.parametrize("args,message", [
    (["-n", "2", "no_such_script.py"], "script no_such_script.py: no such file"),
    (["-n", "0", TRAIN], "-n 0: need at least one rank"),
    (["-n", "2", "--mpirun", "no-such-mpirun", TRAIN], "--mpirun no-such-mpirun: not found"),
    (["-n", "2", "--hostfile", "no_such_hosts", TRAIN], "--hostfile no_such_hosts: no such file"),
])
def test_bad_input_is_one_line_and_exit_2(run_cli, args, message):
    proc = run_cli("launch", *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"distvlog launch: error: {message}"), proc.stderr
