"""`python -m distvlog.dist.run script.py [args]`: how `distvlog launch` runs a script on every rank.

As with `python -m mpi4py`, an unhandled exception or a non-zero `sys.exit()` in one rank aborts the whole job
instead of leaving the other ranks waiting in a collective forever; either is logged as an F record. Before
aborting it waits two flush intervals: the other ranks are usually blocked in MPI with the GIL released, so
their flush timers get their last records to disk before the launcher kills them with SIGKILL, which no
handler can catch.
"""

from __future__ import annotations

import os
import runpy
import sys
import time

from ..logger import _lifecycle, flush


def _abort(code: int) -> None:
    from mpi4py import MPI  # not comm.world(): its launch check may be the very error being reported

    flush()
    time.sleep(2 * _lifecycle.FLUSH_INTERVAL_S)
    sys.stderr.flush()
    MPI.COMM_WORLD.Abort(code)


def _report_exit(exc: SystemExit) -> int:
    """A non-zero `sys.exit()`: printed as Python would and logged as an F record where it was called, so
    `distvlog launch` names the rank and its reason (the job is aborted before Python could print it)."""
    status, message = (int(exc.code), "") if isinstance(exc.code, int) else (1, f": {exc.code}")
    if message:
        print(exc.code, file=sys.stderr)
    _lifecycle.log_failure(f"exited with status {status}{message}", exc, exc.__traceback__)
    return status


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m distvlog.dist.run script.py [args]")
    script = argv[0]
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _abort(_report_exit(exc))
        raise
    except BaseException:
        sys.excepthook(*sys.exc_info())  # distvlog's hook logs the traceback as an F record, then prints it
        _abort(1)
    from . import finalize, is_initialized

    if is_initialized():
        finalize()  # the closing clock offsets; does nothing if the script finalized already


if __name__ == "__main__":
    main(sys.argv[1:])
