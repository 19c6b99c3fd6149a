"""Jobs for test_review_dp.py, run as `mpirun -n N python review_dp_jobs.py MODE [args]`: what each rank has to
say goes to `results/rank-R.json` (mpi_jobs.say), as for mpi_jobs.py."""

from __future__ import annotations

import os
import sys
import traceback

from mpi_jobs import Params, say

import distvlog as dv


def mode_flags(*values: str) -> None:
    """DataParallel's debug mode and the sink's echo, for DISTVLOG_DP_DEBUG and DISTVLOG_ALSOLOGTOSTDERR set to
    each of `values`."""
    from distvlog.logger._sink import RankFile

    debug, echo = [], []
    for value in values:
        os.environ["DISTVLOG_DP_DEBUG"] = os.environ["DISTVLOG_ALSOLOGTOSTDERR"] = value
        debug.append(dv.DataParallel(Params([(8, 16), (16, 4)], seed=0)).debug)
        echo.append(RankFile().echo_all)
    say(debug=debug, echo=echo)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    try:
        globals()[f"mode_{mode}"](*args)
    except Exception:
        say(crash=traceback.format_exc())
        raise
