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


def run_plain(tmp_path: Path, ranks: int, argv: list[str]) -> subprocess.CompletedProcess:
    """`mpirun -n ranks python argv...` from the mpich wheel, logs under tmp_path/logs, no distvlog settings."""
    launcher = find_launcher(None)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_"))}
    env.update(PYTHONPATH=str(REPO), DISTVLOG_LOG_DIR=str(tmp_path / "logs"))
    cmd = mpi_command(launcher, launcher_kind(launcher), ranks, {}, None) + [sys.executable, *argv]
    return subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=HANG_TIMEOUT_S)


def rank_logs(tmp_path: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in (tmp_path / "logs").glob("*/rank-*.log") if p.parent.name != "latest"}


@pytest.mark.parametrize("code", [RAISES_ON_ONE, RAISES_BEFORE_MPI], ids=["in-mpi", "before-mpi-init"])
def test_an_unhandled_exception_on_one_rank_aborts_the_job(tmp_path: Path, code: str):
    """The job ends with a non-zero status; the failed rank's file has its F record at the raising line; a
    rank waiting in a collective that releases the interpreter lock (Barrier) has everything it logged
    before it was killed in its file."""
    script = tmp_path / "job.py"
    script.write_text(code)
    proc = run_plain(tmp_path, 2, [str(script)])
    assert proc.returncode != 0, proc.stderr
    assert "ValueError: boom on rank 1" in proc.stderr  # Python's own traceback, printed once
    logs = rank_logs(tmp_path)
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
    train = [str(REPO / "launch" / "train.py"), "--data", "synthetic", "--steps", "5", "--debug"]
    proc = run_plain(tmp_path, 4, [*train, "--inject-nan-rank", "2", "--inject-nan-step", "3"])
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
    proc = run_plain(tmp_path, 2, [str(script)])
    assert proc.returncode == 0, proc.stderr
    files = sorted(p for p in (tmp_path / "logs").glob("*/rank-*.log") if p.parent.name != "latest")
    assert [p.name for p in files] == ["rank-0.log", "rank-1.log"]
    for path in files:
        assert path.read_text().splitlines()[-1].endswith(f"distvlog:0] [rank {files.index(path)}] {END_RECORD}")


EXITS_ON_ONE = """
import sys
import distvlog as dv
from mpi4py import MPI

dv.init()
try:
    sys.exit(2)  # caught and kept: the script goes on, and this exit must not end the job
except SystemExit as caught:
    kept = caught
dv.get_logger("job").info("went on")
if dv.get_rank() == 1 and "--sys.exit" in sys.argv:
    sys.exit(3)  # @exit
if dv.get_rank() == 1 and "--exit" in sys.argv:
    exit(3)  # @exit (the builtin, as scripts call it too)
MPI.COMM_WORLD.Barrier()  # without --exit every rank comes; with it rank 1 never does
"""


@pytest.mark.parametrize("how", ["sys.exit", "exit"])
def test_a_non_zero_sys_exit_on_one_rank_ends_the_job_with_its_status(tmp_path: Path, how: str):
    """`sys.exit(3)` (or the builtin `exit(3)`) on rank 1 while rank 0 waits in a collective: the job ends
    with status 3 (not a hang with rank 1 in MPI_Finalize), the F record at the call names the status; a
    sys.exit the script caught earlier changed nothing."""
    script = tmp_path / "job.py"
    script.write_text(EXITS_ON_ONE)
    proc = run_plain(tmp_path, 2, [str(script), f"--{how}"])
    assert proc.returncode == 3, proc.stderr
    lines = EXITS_ON_ONE.splitlines()
    line = next(i for i, text in enumerate(lines, start=1) if "# @exit" in text and text.strip().startswith(how))
    logs = rank_logs(tmp_path)
    assert re.search(rf"^F\S+ \S+ \d+ job\.py:{line}\] \[rank 1\] exited with status 3$", logs["rank-1.log"], re.M)
    assert "] [rank 0] went on\n" in logs["rank-0.log"] and "\0" not in logs["rank-1.log"]


def test_a_sys_exit_the_script_caught_leaves_the_job_to_end_normally(tmp_path: Path):
    """Every rank catches a `sys.exit(2)` and goes on to the end: status 0, every file ends with the end
    record, no F record."""
    script = tmp_path / "job.py"
    script.write_text(EXITS_ON_ONE)
    proc = run_plain(tmp_path, 2, [str(script)])
    assert proc.returncode == 0, proc.stderr
    for name, text in rank_logs(tmp_path).items():
        assert text.rstrip("\n").endswith(END_RECORD) and "\nF" not in text, (name, text)
