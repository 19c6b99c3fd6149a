"""A failed DataParallel check in debug mode names one culprit: the rank that brought the NaN says so once,
the others say in one line each that they stopped because of it, and `distvlog launch` names the culprit
from the check's own record, not every rank."""

from __future__ import annotations

import re

from launch_testkit import TRAIN


def test_a_nan_on_one_rank_names_that_rank_once(run_cli):
    proc = run_cli(
        "launch",
        "-n",
        "4",
        TRAIN,
        "--data",
        "synthetic",
        "--steps",
        "5",
        "--debug",
        "--inject-nan-rank",
        "2",
        "--inject-nan-step",
        "3",
    )
    assert proc.returncode == 1
    err = proc.stderr
    check = 'DataParallel check failed check="before allreduce of bucket 0 of step 3" culprits=[2]'
    culprit = [line for line in err.splitlines() if check in line and " reason=" in line]
    stopped = [line for line in err.splitlines() if check in line and ' stopped_by="rank 2"' in line]
    assert len(culprit) == 1 and "] [rank 2] " in culprit[0], err
    assert sorted(re.search(r"\] \[rank (\d)\] ", line).group(1) for line in stopped) == ["0", "1", "3"], err
    assert "Traceback" not in err, err  # (the tracebacks are in the rank files)
    assert re.search(
        r"^distvlog launch: rank 2 failed DataParallel's check before allreduce of bucket 0 of step 3 "
        r"\(train\.py:\d+\): rank 2 step 3: gradient of linear_1\.b_0 has 64 NaN and 0 Inf, produced by "
        r"linear\d+GradNode \(forward at train\.py:\d+\)",
        err,
        re.M,
    ), err
    assert "distvlog launch: ranks 0,1,3 stopped because of rank 2\n" in err, err
    assert " failed: " not in err, err  # no rank listed as failed on its own
