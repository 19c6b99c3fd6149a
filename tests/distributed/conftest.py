"""Helpers for tests that run real MPI ranks: the launcher `distvlog launch` would use, with a timeout
against hangs (never a limit on how fast anything must be)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from launch_testkit import HANG_TIMEOUT_S, job_env

from distvlog.launch.command import find_launcher, launcher_kind, mpi_command

JOBS = Path(__file__).with_name("mpi_jobs.py")


@pytest.fixture
def run_mpi(tmp_path: Path):
    """run_mpi(n, mode, *args, env={}) runs tests/distributed/mpi_jobs.py MODE on n ranks."""
    launcher = find_launcher(None)
    kind = launcher_kind(launcher)

    def run(n: int, mode: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        cmd = mpi_command(launcher, kind, n, {}, None) + [sys.executable, str(JOBS), mode, *args]
        return subprocess.run(
            cmd, env=job_env(tmp_path, env), cwd=tmp_path, capture_output=True, text=True, timeout=HANG_TIMEOUT_S
        )

    return run


@pytest.fixture
def rank_results(tmp_path: Path):
    """What each rank of the last mpi_jobs.py run wrote: {rank: fields}."""

    def read(proc: subprocess.CompletedProcess) -> dict[int, dict]:
        assert proc.returncode == 0, proc.stdout + proc.stderr  # the jobs catch their expected errors
        found = {int(p.stem[5:]): json.loads(p.read_text()) for p in (tmp_path / "results").glob("rank-*.json")}
        assert "crash" not in str(found), proc.stdout + proc.stderr
        for p in (tmp_path / "results").glob("rank-*.json"):
            p.unlink()
        return found

    return read


@pytest.fixture
def run_cli(tmp_path: Path):
    """run_cli(*args, env={}) runs `python -m distvlog ARGS` in tmp_path."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "distvlog", *args],
            env=job_env(tmp_path, env),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=HANG_TIMEOUT_S,
        )

    return run


@pytest.fixture
def start_cli(tmp_path: Path):
    """start_cli(*args, env={}) starts `python -m distvlog ARGS` in tmp_path (text pipes); killed at the end."""
    started: list[subprocess.Popen] = []

    def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "distvlog", *args],
                env=job_env(tmp_path, env),
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        return started[-1]

    yield start
    for proc in started:
        proc.kill()
        proc.communicate()


@pytest.fixture
def start_job(tmp_path: Path):
    """start_job(cmd, env={}) starts a launcher command line in tmp_path with the ranks' environment of run_mpi
    (byte pipes); killed at the end."""
    started: list[subprocess.Popen] = []

    def start(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        started.append(
            subprocess.Popen(
                cmd, env=job_env(tmp_path, env), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        )
        return started[-1]

    yield start
    for proc in started:
        proc.kill()
        proc.communicate()
