"""`python -m distvlog.launch.run script.py [args]`: how `distvlog launch` runs a script on every rank.

As with `python -m mpi4py`, an unhandled exception or a non-zero `sys.exit()` in one rank aborts the whole job
instead of leaving the other ranks waiting in a collective forever; either is logged as an F record. Before
aborting it waits two flush intervals: the other ranks are usually blocked in MPI with the GIL released, so
their flush timers get their last records to disk before the launcher kills them with SIGKILL, which no
handler can catch. A KeyboardInterrupt (Ctrl-C) aborts it too, with status 130, logged as a W record of where
it was raised. A script that ends normally leaves END_RECORD as its rank's last word, so that
`distvlog launch` can tell a rank that was killed (SIGKILL, a segfault, `os._exit()`) from one that ended.

The process the launcher starts is the rank's parent (`supervise`): it runs this in a child and, when that
child dies badly, writes how (status, signal, a crash's stacks) into the rank's file. Run without it, a
crash's stacks go to stderr as faulthandler's usually do.
"""

from __future__ import annotations

import faulthandler
import os
import runpy
import signal
import sys
import traceback
from typing import NoReturn

from ..distributed import DataParallelError
from ..distributed.job import abort_job, exit_status
from ..logger import IDENTITY, log_end, log_failure, log_interrupt
from .supervise import CRASH_FD, DUMP_SIGNAL


def _abort(code: int) -> NoReturn:
    """End the whole job with status `code` (see `abort_job`), else exit with it."""
    abort_job(code)
    raise SystemExit(code)


def _say(line: str) -> None:
    """A line on stderr in one write: every rank writes to the same stream, and print() writes the text and
    its newline apart, so two ranks' lines would interleave."""
    sys.stderr.write(line)
    sys.stderr.flush()


def _report_exit(exc: SystemExit) -> int:
    """A non-zero `sys.exit()`: printed as Python would and logged as an F record where it was called, so
    `distvlog launch` names the rank and its reason (the job is aborted before Python could print it)."""
    status, message = exit_status(exc.code)
    if message:
        _say(f"{exc.code}\n")
    log_failure(f"exited with status {status}{message}", exc, exc.__traceback__)
    return status


def _report_interrupt(exc: KeyboardInterrupt) -> int:
    """Ctrl-C: not the script's failure. Where SIGINT found this rank, as one line on stderr (not a traceback
    per rank) and a W record with its stack, so that `distvlog launch` names the place; 130, as a shell says."""
    where = log_interrupt(exc)
    place = f" at {os.path.basename(where.filename)}:{where.lineno}" if where is not None else ""
    _say(f"distvlog: rank {IDENTITY.rank}: KeyboardInterrupt{place}\n")
    return 128 + signal.SIGINT


def _report_check(exc: DataParallelError) -> None:
    """A failed DataParallel check: its own record, echoed on every rank, has said on stderr who caused it
    and who stopped because of them (a line each). The traceback goes to the file only, as the failure (F) of
    a culprit, an E record of the others, so that `distvlog launch` names the culprits alone as failed."""
    if not exc.culprits:  # (raised by older code, or by hand): as any other exception
        sys.excepthook(type(exc), exc, exc.__traceback__)
        return
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
    fatal = IDENTITY.rank in exc.culprits
    log_failure(f"Unhandled exception in main thread:\n{text}", exc, exc.__traceback__, fatal=fatal)


def _log_end() -> None:
    """The PyTorch adapter's finalize() first, if the script started it (its closing records come before the
    end), then END_RECORD."""
    adapter = sys.modules.get("distvlog.torch")
    if adapter is not None:
        adapter.finalize()
    log_end()


def _write_crashes_to_parent() -> None:
    """A crash (segfault, abort), or the parent's DUMP_SIGNAL, prints the Python stack of every thread into
    the pipe the parent reads."""
    fd = int(os.environ.pop(CRASH_FD))
    os.set_inheritable(fd, False)
    faulthandler.enable(file=fd, all_threads=True)
    faulthandler.register(DUMP_SIGNAL, file=fd, all_threads=True)


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m distvlog.launch.run script.py [args]")
    if CRASH_FD in os.environ:
        _write_crashes_to_parent()
    script = argv[0]
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _abort(_report_exit(exc))
        _log_end()
        raise
    except KeyboardInterrupt as exc:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a second Ctrl-C would interrupt the report)
        _abort(_report_interrupt(exc))
    except DataParallelError as exc:
        _report_check(exc)
        _abort(1)
    except BaseException:
        sys.excepthook(*sys.exc_info())  # distvlog's hook logs the traceback as an F record, prints it, aborts
        _abort(1)
    from ..distributed import finalize, is_initialized

    if is_initialized():
        finalize()  # the closing clock offsets; does nothing if the script finalized already
    _log_end()


if __name__ == "__main__":
    main(sys.argv[1:])
