"""What tests of `distvlog launch` read from its output: the run directory it names, rank 0's losses."""

from __future__ import annotations

import re
from pathlib import Path

TRAIN = str(Path(__file__).resolve().parents[2] / "launch" / "train.py")


def run_dir_of(proc) -> Path:
    match = re.search(r"distvlog launch: logs: (\S+)/ \(", proc.stderr)
    assert match, proc.stderr
    return Path(match.group(1))


def losses(stdout: str) -> list[float]:
    return [float(x) for x in re.findall(r"^step +\d+ +loss (\S+)", stdout, re.M)]


def launch_train(tmp: Path, n: int, *args: str) -> Path:
    """The run directory of `distvlog launch -n N launch/train.py ARGS` with logs under `tmp` (which must
    succeed): for tests that read a real run's logs."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_"))}
    env.update(PYTHONPATH=str(Path(TRAIN).parents[1]), DISTVLOG_LOG_DIR=str(tmp / "logs"))
    proc = subprocess.run(
        [sys.executable, "-m", "distvlog", "launch", "-n", str(n), TRAIN, *args],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    return run_dir_of(proc)
