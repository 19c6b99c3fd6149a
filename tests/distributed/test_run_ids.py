"""One job, one run directory, whatever started its ranks: MPICH's Hydra with one proxy per host entry (its
fork launcher stands in for ssh to other hosts sharing the file system), Open MPI, two torchrun agents as
on two nodes, and ranks whose time zones differ. `latest` points at the run, `merge` and `diff` read the
whole job; two jobs started in the same second never share a run."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from distvlog.launch.command import find_launcher, launcher_kind

pytestmark = pytest.mark.timeout(300)
HANG_TIMEOUT_S = 240

SCRIPT = """
import os
import distvlog.logger as dlog
log = dlog.get_logger()
log.info("hello", tz=os.environ.get("TZ", ""))
if dlog.IDENTITY.rank == 1:
    log.error("rank one fails")
"""
ZONES = ("Asia/Tokyo", "America/Los_Angeles", "Europe/Berlin", "UTC")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "job.py"
    path.write_text(SCRIPT)
    return path


def _hydra() -> str:
    launcher = find_launcher(None)
    if launcher_kind(launcher) != "hydra":
        pytest.skip(f"{launcher} is not MPICH's Hydra")
    return launcher


def _finish(proc: subprocess.Popen) -> None:
    try:
        out, err = proc.communicate(timeout=HANG_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, (out + err).decode(errors="replace")


def _runs(logs: Path) -> list[Path]:
    return sorted(p for p in logs.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))


def _one_run_of(logs: Path, n: int, tag: str) -> Path:
    """The one run under `logs`: every rank's file, each naming it, `latest` at it; its name ends in `tag`."""
    (run,) = _runs(logs)
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-{tag}", run.name), run.name
    assert sorted(p.name for p in run.iterdir()) == [f"rank-{r}.log" for r in range(n)]
    assert os.readlink(logs / "latest") == run.name
    for r in range(n):
        assert f'"run_id":"{run.name}"' in (run / f"rank-{r}.log").read_text()
    return run


def _tools_read_the_whole_job(run_cli, n: int) -> None:
    merge = run_cli("merge", "logs")
    assert merge.returncode == 0 and "warning" not in merge.stderr, merge.stderr
    assert all(f"[rank {r}] hello tz=" in merge.stdout for r in range(n)), merge.stdout
    diff = run_cli("diff", "logs")
    assert diff.returncode == 1 and "warning" not in diff.stderr, diff.stderr
    assert diff.stdout.startswith(f"{n} ranks") and "error: rank 1: rank one fails" in diff.stdout, diff.stdout


def test_hydra_with_a_proxy_per_host_and_ranks_in_four_time_zones(tmp_path, script, start_job, run_cli):
    mpmd = []
    for zone in ZONES:
        mpmd += [":", "-n", "1", "-env", "TZ", zone, sys.executable, str(script)]
    hosts = ",".join(["localhost", "127.0.0.1"] * 2)
    _finish(start_job([_hydra(), "-launcher", "fork", "-hosts", hosts, "-ppn", "1", *mpmd[1:]]))
    _one_run_of(tmp_path / "logs", 4, "hydra-[0-9a-f]{8}")
    _tools_read_the_whole_job(run_cli, 4)


def test_two_hydra_jobs_of_two_hosts_started_together_get_a_run_each(tmp_path, script, start_job):
    cmd = [_hydra(), "-launcher", "fork", "-hosts", "localhost,127.0.0.1", "-ppn", "1", "-n", "2"]
    jobs = [start_job([*cmd, sys.executable, str(script)]) for _ in range(2)]
    for job in jobs:
        _finish(job)
    runs = _runs(tmp_path / "logs")
    assert len(runs) == 2, runs
    for run in runs:
        assert sorted(p.name for p in run.iterdir()) == ["rank-0.log", "rank-1.log"]


@pytest.mark.skipif(shutil.which("mpirun.openmpi") is None, reason="Open MPI (openmpi-bin) is not installed")
def test_openmpi_ranks_in_different_time_zones(tmp_path, script, start_job, run_cli):
    cmd = ["mpirun.openmpi", "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    for zone in ZONES[:3]:
        cmd += ["-n", "1", "-x", f"TZ={zone}", sys.executable, str(script), ":"]
    _finish(start_job(cmd[:-1]))
    _one_run_of(tmp_path / "logs", 3, "pmix-[0-9a-f]{8}")
    _tools_read_the_whole_job(run_cli, 3)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_torchrun_agents_as_on_two_nodes(tmp_path, script, start_job, run_cli):
    pytest.importorskip("torch")
    torchrun = Path(sys.executable).with_name("torchrun")
    port = str(_free_port())
    agents = [
        start_job(
            [str(torchrun), "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1"]
            + ["--master-addr", "127.0.0.1", "--master-port", port, str(script)],
            {"TZ": zone},
        )
        for node, zone in enumerate(ZONES[:2])
    ]
    for agent in agents:
        _finish(agent)
    _one_run_of(tmp_path / "logs", 2, "torchrun-[0-9a-f]{8}")
    _tools_read_the_whole_job(run_cli, 2)


LOGS_BEFORE_INIT = """
import distvlog as dv
log = dv.get_logger()
log.info("before init")
dv.init()
log.info("after init")
dv.finalize()
"""


def test_a_rank_that_logged_in_another_run_moves_there_at_init(tmp_path, start_job):
    """Rank 1 logs before `dv.init()` into a run of its own (here named apart by DISTVLOG_RUN_ID; on a cluster:
    no shared file system, or a launcher distvlog does not know); init carries its file into rank 0's run,
    every record with it, and removes the run it leaves."""
    script = tmp_path / "early.py"
    script.write_text(LOGS_BEFORE_INIT)
    cmd = [_hydra(), "-launcher", "fork", "-hosts", "localhost,127.0.0.1", "-ppn", "1"]
    cmd += ["-n", "1", sys.executable, str(script), ":", "-n", "1", "-env", "DISTVLOG_RUN_ID", "alone"]
    proc = start_job([*cmd, sys.executable, str(script)])
    _finish(proc)
    run = _one_run_of(tmp_path / "logs", 2, "hydra-[0-9a-f]{8}")
    text = (run / "rank-1.log").read_text()
    assert "[rank 1] before init" in text and "[rank 1] after init" in text
    assert not (tmp_path / "logs" / "alone").exists()
