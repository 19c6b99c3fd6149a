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
