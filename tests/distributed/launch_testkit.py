"""What tests of `distvlog launch` read from its output: the run directory it names, rank 0's losses."""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRAIN = str(REPO / "launch" / "train.py")
HANG_TIMEOUT_S = 240  # against hangs only: never a limit on how fast anything must be


def job_env(tmp: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without distvlog's and glog's settings, the repository importable, logs under `tmp`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_"))}
    env.update(PYTHONPATH=str(REPO), DISTVLOG_LOG_DIR=str(tmp / "logs"), **(extra or {}))
    return env


def run_dir_of(proc) -> Path:
    match = re.search(r"distvlog launch: logs: (\S+)/ \(", proc.stderr)
    assert match, proc.stderr
    return Path(match.group(1))


def losses(stdout: str) -> list[float]:
    return [float(x) for x in re.findall(r"^step +\d+ +loss (\S+)", stdout, re.M)]


def launch_train(tmp: Path, n: int, *args: str) -> Path:
    """The run directory of `distvlog launch -n N launch/train.py ARGS` with logs under `tmp` (which must
    succeed): for tests that read a real run's logs."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "distvlog", "launch", "-n", str(n), TRAIN, *args],
        env=job_env(tmp),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    return run_dir_of(proc)


LIVE_GUARD_S = 300  # against hangs of a broken test only: never a limit on how fast anything must be


def live_run_dir(logs: Path, ranks: int) -> Path:
    """The run directory of the job writing under the log root `logs`, once its `ranks` rank files are there."""
    import time

    deadline = time.monotonic() + LIVE_GUARD_S
    while time.monotonic() < deadline:
        for run in logs.glob("*-*"):
            if run.is_dir() and len(list(run.glob("rank-*.log"))) == ranks:
                return run
        time.sleep(0.2)
    raise AssertionError(f"no job wrote {ranks} rank files under {logs}")


def finish(proc) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of a started process (text pipes, a session of its own), killed with
    everything it started if it outlives LIVE_GUARD_S."""
    import os
    import signal
    import subprocess

    try:
        out, err = proc.communicate(timeout=LIVE_GUARD_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return proc.returncode, out, err
