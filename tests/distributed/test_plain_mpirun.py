"""Plain `mpirun -n N python script.py`, without `distvlog launch`: an unhandled exception on one rank
logs it, flushes, and aborts the whole job (as `python -m mpi4py` does), instead of the other ranks
waiting forever in a collective and the failed rank in MPI_Finalize. Real ranks, the mpich wheel's mpirun;
the timeout only guards against the hang this is about."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from distvlog.format import END_RECORD
from distvlog.launch.command import find_launcher, launcher_kind, mpi_command

REPO = Path(__file__).resolve().parents[2]
HANG_TIMEOUT_S = 240  # against the hang this is about; never a limit on speed

RAISES_ON_ONE = """
import distvlog as dv
from mpi4py import MPI

dv.init()
log = dv.get_logger("job")
log.info("started")
if dv.get_rank() == 1:
    raise ValueError("boom on rank 1")  # @raise
log.info("waiting for rank 1")
MPI.COMM_WORLD.Barrier()  # rank 1 never comes: only the abort ends this rank
"""
RAISES_BEFORE_MPI = """
import distvlog as dv

dv.get_logger("job").info("started")  # no MPI_Init yet on this rank
if dv.get_rank() == 1:
    raise ValueError("boom on rank 1")  # @raise
from mpi4py import MPI  # rank 0 waits in MPI_Init for a rank that will never call it
MPI.COMM_WORLD.Barrier()
"""


@pytest.mark.parametrize("code", [RAISES_ON_ONE, RAISES_BEFORE_MPI], ids=["in-mpi", "before-mpi-init"])
def test_an_unhandled_exception_on_one_rank_aborts_the_job(tmp_path: Path, code: str):
    """The job ends with a non-zero status; the failed rank's file has its F record at the raising line; a
    rank waiting in a collective that releases the interpreter lock (Barrier) has everything it logged
    before it was killed in its file."""
    script = tmp_path / "job.py"
    script.write_text(code)
    launcher = find_launcher(None)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_"))}
    env.update(PYTHONPATH=str(REPO), DISTVLOG_LOG_DIR=str(tmp_path / "logs"))
    cmd = mpi_command(launcher, launcher_kind(launcher), 2, {}, None) + [sys.executable, str(script)]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    assert proc.returncode != 0, proc.stderr
    assert "ValueError: boom on rank 1" in proc.stderr  # Python's own traceback, printed once
    logs = {p.name: p.read_text() for p in (tmp_path / "logs").glob("*/rank-*.log") if p.parent.name != "latest"}
    assert sorted(logs) == ["rank-0.log", "rank-1.log"], logs
    raise_line = next(i for i, line in enumerate(code.splitlines(), start=1) if "# @raise" in line)
    assert re.search(
        rf"^F\S+ \S+ \d+ job\.py:{raise_line}\] \[rank 1\] Unhandled exception in main thread:",
        logs["rank-1.log"],
        re.M,
    ), logs["rank-1.log"]
    if code is RAISES_ON_ONE:  # (MPI_Init holds the interpreter lock: no flush thread runs while it waits)
        assert "] [rank 0] started\n" in logs["rank-0.log"]
        assert "] [rank 0] waiting for rank 1\n" in logs["rank-0.log"]


def test_a_failed_check_prints_its_traceback_on_the_culprit_only(tmp_path: Path):
    """DataParallel's debug check stops every rank when rank 2 brings a NaN: under plain mpirun the culprit
    prints the traceback, the others only their one-line record naming it, and the job ends."""
    launcher = find_launcher(None)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_"))}
    env.update(PYTHONPATH=str(REPO), DISTVLOG_LOG_DIR=str(tmp_path / "logs"))
    train = [str(REPO / "launch" / "train.py"), "--data", "synthetic", "--steps", "5", "--debug"]
    faults = ["--inject-nan-rank", "2", "--inject-nan-step", "3"]
    cmd = mpi_command(launcher, launcher_kind(launcher), 4, {}, None) + [sys.executable, *train, *faults]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    assert proc.returncode != 0, proc.stderr
    assert proc.stderr.count("Traceback (most recent call last):") == 1, proc.stderr
    assert "DataParallelError: DataParallel check before allreduce of bucket 0 of step 3 failed: rank 2" in proc.stderr
    stopped = re.findall(r"\] \[rank (\d)\] DataParallel check failed .* stopped_by=\"rank 2\"", proc.stderr)
    assert sorted(stopped) == ["0", "1", "3"], proc.stderr


def test_every_rank_of_a_plain_mpirun_job_ends_its_log_with_the_end_record(tmp_path: Path):
    """A normal exit writes END_RECORD, whoever started the ranks (here plain mpirun, no `distvlog launch`):
    `merge --follow` and the launcher's report tell a rank that ended from one that was killed by it."""
    script = tmp_path / "job.py"
    script.write_text("import distvlog as dv\ndv.init()\ndv.get_logger('job').info('trained')\n")
    launcher = find_launcher(None)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_"))}
    env.update(PYTHONPATH=str(REPO), DISTVLOG_LOG_DIR=str(tmp_path / "logs"))
    cmd = mpi_command(launcher, launcher_kind(launcher), 2, {}, None) + [sys.executable, str(script)]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    files = sorted(p for p in (tmp_path / "logs").glob("*/rank-*.log") if p.parent.name != "latest")
    assert [p.name for p in files] == ["rank-0.log", "rank-1.log"]
    for path in files:
        assert path.read_text().splitlines()[-1].endswith(f"distvlog:0] [rank {files.index(path)}] {END_RECORD}")
