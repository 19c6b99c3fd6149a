"""Job control: the exit rules a job of several ranks needs when nothing but a plain `mpirun` started it.

A rank that leaves while the others wait for it in a collective leaves them waiting forever: Hydra ends a
job only when one of its processes dies of a signal or exits without MPI's finalize. So, as `python -m
mpi4py` does, an unhandled exception in a rank of several, or a non-zero `sys.exit()` of its main thread,
ends the whole job (`abort_job`): through MPI where this process initialised it, else through Hydra's PMI
connection, which needs no MPI_Init. Open MPI ends a job when a rank exits non-zero, torchrun's agent when
a worker fails: there `abort_job` returns and the rank exits as it would have.

The logger installs these rules as it is imported (a rank's failure must end the job even if it never
logged) and gives this module what it needs of it (`Logger`): this module imports nothing of the logger's.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import os
import signal
import stat
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_ABORT_GRACE_S = 3.0  # how long an abort through a PMI connection may take before this process exits anyway


@dataclass(frozen=True)
class Logger:
    """What job control asks of the logger."""

    several: Callable[[], bool]  # whether this process is, now, one rank of several
    settle: Callable[[], None]  # cut the reserve off this rank's file, write what comes later at once
    log_exit: Callable[[str, list[traceback.FrameSummary]], None]  # an F record at the user's frame of a stack
    is_own_file: Callable[[str], bool]  # whether a frame's file is distvlog's (its processes exit as they choose)
    flush_wait_s: float  # how long the other ranks need to write what they buffer


_logger: Logger | None = None


def install(logger: Logger) -> None:
    """The rules, for this process: `sys.exit`, `exit()` and `quit()` of a rank of several are ours."""
    global _logger
    _logger = logger
    if logger.several():
        sys.exit = _exit
        for name in ("exit", "quit"):
            if hasattr(builtins, name):
                setattr(builtins, name, _BuiltinExit(getattr(builtins, name)))


def after_unhandled(exc_type: type[BaseException]) -> None:
    """An unhandled exception of the main thread has been logged and printed: a rank of several ends the job
    (plain `mpirun python script.py`: the others would wait forever), with 130 for a Ctrl-C."""
    if _logger is not None and _logger.several():
        abort_job(128 + signal.SIGINT if issubclass(exc_type, KeyboardInterrupt) else 1)


def ends_at_exit(logged: bool) -> bool:
    """At exit: whether this process leaves by a non-zero `sys.exit()` of its main thread, as one rank of
    several: then it ends the job, after an F record where it was called (unless `logged`: `distvlog
    launch`'s runner logs the exit itself). Returns where no abort applies (see `abort_job`)."""
    if not (_exit_call and _logger is not None and _logger.several() and _exiting_by(_exit_call[2])):
        return False
    status, stack, _ = _exit_call
    code, message = exit_status(status)
    if not logged:
        _logger.log_exit(f"exited with status {code}{message}", stack)
    abort_job(code)
    return True


def exit_status(code: object) -> tuple[int, str]:
    """What a process exits with for `sys.exit(code)`, as Python decides (an int is the status; anything else
    is printed and the status is 1), and the text an F record adds for it."""
    return (int(code), "") if isinstance(code, int) else (1, f": {code}")


def abort_job(code: int) -> None:
    """End the whole job with status `code`, as `python -m mpi4py` does for an unhandled exception: through
    MPI if this process initialised it, else through a Hydra launcher's PMI connection (MPICH, Intel MPI).
    Returns when neither applies. First this rank's file is settled (its reserve cut), and the other ranks get
    the logger's flush wait for records they buffer (unmapped files): they are usually blocked in MPI with the
    interpreter lock released, so their flush threads run, and the abort kills them with SIGKILL, which no
    handler sees (their reserves are left to the next run)."""
    mpi = sys.modules.get("mpi4py.MPI")
    mpi = mpi if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() else None
    pmi_fd = os.environ.get("PMI_FD", "")
    if not (pmi_fd.isdigit() and _is_socket(int(pmi_fd))):
        pmi_fd = ""  # (inherited by a subprocess of a rank, which closed it: the number may be a file now)
    if mpi is None and not pmi_fd:
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a Ctrl-C meanwhile would only interrupt the abort)
    if _logger is not None:
        _logger.settle()  # (the abort kills this process too: no reserve may be left in its file)
        time.sleep(_logger.flush_wait_s)
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    if mpi is not None:
        mpi.COMM_WORLD.Abort(code)
    try:  # Hydra kills this process at once; the wait is bounded, for a PMI_FD of some other launcher
        os.write(int(pmi_fd), f"cmd=abort exitcode={code}\n".encode())
    except (OSError, ValueError):
        return
    time.sleep(_ABORT_GRACE_S)


def _is_socket(fd: int) -> bool:
    try:
        return stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:
        return False


_exit_call: list = []  # the main thread's last sys.exit(non-zero): [status, the stack it was called from, the exception]


class _ExitStatus(SystemExit):
    """A non-zero `sys.exit()` of the main thread. Under plain `mpirun` a rank that leaves that way would
    wait in MPI_Finalize for ranks that wait for it in a collective: the job would hang. So the exit hook
    ends the job, but only if this exit is the one the process ends with (`_exiting_by`): dropped by a
    script that caught it (Python frames still run), it forgets the call."""

    def __del__(self) -> None:
        try:
            sys._getframe(1)
        except ValueError:
            return  # dropped by the interpreter as it exits, with no Python frame left
        _exit_call.clear()


def _exiting_by(exc: weakref.ref) -> bool:
    """Whether the process exits by that sys.exit(): the interpreter dropped it, not a script that keeps it
    (a reference, or a cycle the collector has not freed yet)."""
    gc.collect()  # (a cycle through the caught exception's traceback; its __del__ forgets the call)
    return bool(_exit_call) and exc() is None


def _exit(status: object = None) -> None:
    """`sys.exit` for a process that is one rank of several (distvlog's own processes, such as `distvlog
    launch`'s rank parents, end as they choose)."""
    _exit_at(sys._getframe(1), status)


class _BuiltinExit:
    """The builtins `exit()` and `quit()` (site's), for a process that is one rank of several."""

    def __init__(self, original: Any) -> None:
        self.original = original

    def __repr__(self) -> str:
        return repr(self.original)

    def __call__(self, code: object = None) -> None:
        _exit_at(sys._getframe(1), code)


def _exit_at(frame: Any, status: object) -> None:
    if isinstance(status, int) and status == 0 or status is None:
        _exit_call.clear()  # (a later success undoes an exit the script caught)
    elif threading.current_thread() is threading.main_thread() and not _logger.is_own_file(frame.f_code.co_filename):
        exc = _ExitStatus(status)
        _exit_call[:] = [status, traceback.extract_stack(frame), weakref.ref(exc)]
        raise exc
    raise SystemExit(status)
