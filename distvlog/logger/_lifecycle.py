"""Never lose a record: flush on a timer, at exit, on SIGTERM/SIGINT (and, while their action is death,
SIGHUP/SIGUSR1/SIGUSR2), and log unhandled exceptions.

Exception hooks are installed on import (a crash must reach the file even if nothing was logged yet), with
the job's exit rules (`distributed/job.py`: a rank of several that fails ends the job), which they call;
the timer and signal handlers once the file exists. Every hook chains to the one it replaced.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import sysconfig
import threading
import time
import traceback
from typing import Any

from ..distributed import job
from ..format import BLOCKED_IN_C, END_RECORD, IN_PYTHON, OWN_FILE, OWN_LINE
from . import _env
from ._identity import IDENTITY
from ._logger import unechoed_logger
from ._processors import PACKAGE_DIR, is_distvlog_file
from ._sink import SINK, RankFile

_LOGGER_DIR = os.path.join(os.path.dirname(__file__), "")  # distvlog/logger/
_LIBRARY_DIRS = ("<frozen ",) + tuple(
    os.path.join(sysconfig.get_path(kind), "") for kind in ("stdlib", "platstdlib", "purelib", "platlib")
)
FLUSH_INTERVAL_S = _env.read("DISTVLOG_FLUSH_INTERVAL", _env.seconds, 0.5)
_timer_pid: int | None = None
_signals_installed = False


def _timer_loop() -> None:
    stop = threading.Event()
    while not stop.wait(FLUSH_INTERVAL_S):
        with contextlib.suppress(Exception):  # (flush contains write failures; this thread must outlive anything)
            SINK.flush()


def _at_exit() -> None:
    """A normal exit ends the rank's log with END_RECORD, whatever started the process (an unhandled
    exception, `sys.last_value`, has logged its F record instead; so has a rank of several that ends the job
    by a non-zero `sys.exit()`: see the job's rules)."""
    SINK.buffer_bytes = 0  # records logged by later exit hooks go straight to the file
    if not job.ends_at_exit(logged=_failed["logged"]) and not hasattr(sys, "last_value"):
        log_end()
    SINK.settle()


_end = {"logged": False}
_failed = {"logged": False}  # whether this process has logged its failure (an F record) already
_ABORT_WAIT_MAX_S = 2.0  # a long DISTVLOG_FLUSH_INTERVAL must not hold an abort (mapped files need no wait)


def log_end() -> None:
    """END_RECORD, once per process, flushed at once (a launcher may yet kill this rank, as another's
    failure ends the job): `merge --follow` and `distvlog launch` tell a rank that ended from one that was
    killed by it. A process that never logged gets no file for it."""
    if SINK.file_open and not _end["logged"]:
        _end["logged"] = True
        with contextlib.suppress(Exception):  # (at exit: nothing may stop the other exit hooks)
            SINK.write_own("info", END_RECORD)


def _settle_before_death() -> None:
    """The process is about to die (of a signal's default action, by the job's abort) without its exit hook:
    cut the reserve off its file now (a job's launcher may SIGKILL it any moment after), and write what it
    logs from here on at once."""
    SINK.buffer_bytes = 0
    with contextlib.suppress(Exception):  # (the signal must end the process all the same)
        SINK.settle()


def _chain_to(previous: Any):
    def chain(signum: int, frame: Any) -> None:
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:  # SIG_DFL, or a handler installed outside Python
            _settle_before_death()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    return chain


class _Handler:
    """Our handler of a signal: flush, then the handler it replaced (a death: settle the file first). It counts
    its runs, for the watcher."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous
        self.chain = _chain_to(previous)
        self.ends_process = previous == signal.SIG_DFL  # death, no Python code of anyone's (not KeyboardInterrupt)
        self.calls = self.seen = 0  # runs in the main thread; those the watcher has accounted for
        self.ending = False

    def __call__(self, signum: int, frame: Any) -> None:
        self.calls += 1
        SINK.flush_for_signal(signum, frame, self._end if self.ends_process else self.chain)

    def _end(self, signum: int, frame: Any) -> None:
        """Death by this signal. A rank of a job first logs where its main thread was, then lives on for
        _HOLD_S: its peers blocked in C got the same signal, and their watchers need 2 * _PROMPT_S to log where
        they are before the launcher, seeing this rank die, kills them with SIGKILL."""
        if not self.ending and IDENTITY.world_size > 1 and not SINK.forked:  # (a pool's worker is no rank)
            self.ending = True  # (a second signal during the hold ends it at once)
            with contextlib.suppress(Exception):  # the signal must end the process all the same
                where, stack = _stack_of(frame)
                log_at(
                    "warning", f"{signal.Signals(signum).name}{IN_PYTHON}, at (most recent call last):\n{stack}", where
                )
            _settle_before_death()  # (the first of the job's ranks to die gets the others SIGKILLed by Hydra)
            time.sleep(_HOLD_S)
        self.chain(signum, frame)


_CAUGHT = (signal.SIGTERM, signal.SIGINT)  # our handler runs first, then the one it replaced
# Taken over only while their action is the default (death): a job is sent them too (`scancel --signal`, a
# closed terminal's SIGHUP; Hydra's mpirun forwards SIGUSR1 as it does SIGTERM and SIGINT, though MPICH's ranks
# catch it), and the process then settles its file and dies of the signal as before. A handler of anyone's
# own (in Python or in C: MPICH's), or SIG_IGN, stays.
_DEFAULT_DEATHS = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def _caught_or_ignored() -> set[int]:
    """The signals this process catches or ignores, as the kernel sees it. Python's own table does not know a
    handler that C code installed after it started: MPICH's MPI_Init catches SIGHUP and SIGUSR1 (measured), and
    a rank then outlives them. All signals where the kernel's view cannot be read (no /proc)."""
    try:
        with open("/proc/self/status") as status:
            masks = [int(line.split()[1], 16) for line in status if line.startswith(("SigCgt:", "SigIgn:"))]
    except (OSError, ValueError, IndexError):
        return set(signal.valid_signals())
    either = masks[0] | masks[1] if len(masks) == 2 else -1
    return {signum for signum in signal.valid_signals() if either >> (signum - 1) & 1}


def _install_signal_handlers() -> None:
    """Once per process (a forked child keeps its parent's handlers but starts its own watcher)."""
    global _signals_installed, _watcher_pid
    if threading.current_thread() is not threading.main_thread():
        return
    if not _signals_installed:
        handled_in_c = _caught_or_ignored()
        for signum in _CAUGHT + _DEFAULT_DEATHS:
            previous = signal.getsignal(signum)
            if signum in _CAUGHT or (previous == signal.SIG_DFL and signum not in handled_in_c):
                signal.signal(signum, _Handler(previous))
        _signals_installed = True
    if _watcher_pid != os.getpid():
        _watcher_pid = os.getpid()
        _start_signal_watcher()


# Python runs signal handlers in the main thread, between two of its instructions: never while that thread
# is blocked in C, as in an MPI collective that waits for a dead or hung rank. The C-level handler also
# writes the signal's number to the wakeup fd, which a watcher thread reads.
SIGNAL_GRACE_S = 3.0  # how long a process may outlive a SIGTERM whose handler would end it
_PROMPT_S = 0.2  # a main thread that runs Python handles a signal sooner than this
_HOLD_S = 5 * _PROMPT_S  # how long a rank that a signal ends in Python outlives it (see _Handler._end)
_watcher_pipe: tuple[int, int] | None = None  # (read, write) ends, while the write end is Python's wakeup fd
_watcher_pid: int | None = None
WAKE_ON: dict[int, Any] = {}  # signal -> what else it wakes (a thread of the logger's own: _stacks)
MAIN_WAKE: tuple[int, Any] | None = None  # a signal and its Python handler, which does nothing of note (_stacks)


def _start_signal_watcher() -> None:
    global _watcher_pipe
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    if previous != -1:  # someone's own (asyncio's): theirs stays, and handlers run as Python runs them
        signal.set_wakeup_fd(previous)
        os.close(read_end), os.close(write_end)
        return
    _watcher_pipe = (read_end, write_end)
    threading.Thread(target=_watch_signals, args=(read_end,), name="distvlog-signals", daemon=True).start()


def _watch_signals(fd: int) -> None:
    """On a signal we handle (SIGTERM, SIGINT, ...): flush at once. If the main thread has not run our handler
    shortly after (it is blocked in C), log where it is and cut the reserve: a rank stopped in a hang says
    where it hung, and leaves a clean file, even if the launcher kills it next. If that handler would end the
    process, end it after SIGNAL_GRACE_S, with status 128+N."""
    while True:
        try:
            signals = set(os.read(fd, 64))  # (one look per signal, however often it came)
        except OSError:
            return
        for signum in signals & WAKE_ON.keys():
            WAKE_ON[signum]()
        for signum in signals & {*_CAUGHT, *_DEFAULT_DEATHS}:
            handler = signal.getsignal(signum)
            if not isinstance(handler, _Handler):  # replaced by the user's own: theirs to act
                continue
            SINK.flush()
            arrived = time.monotonic()
            time.sleep(_PROMPT_S)
            handled = _handled(handler)
            if not handled and _wake_main_thread(signum):
                time.sleep(_PROMPT_S)
                handled = _handled(handler)
            if handled:
                continue
            name = signal.Signals(signum).name
            where, stack = _main_thread_at()
            log_at("warning", f"{name}{BLOCKED_IN_C}, at (most recent call last):\n{stack}", where)
            if not handler.ends_process:  # (a KeyboardInterrupt once back in Python; a job's launcher may not wait)
                SINK.cut_reserve()
            else:  # the process dies now, whether the main thread returns to Python or not
                _settle_before_death()
                time.sleep(max(0.0, SIGNAL_GRACE_S - (time.monotonic() - arrived)))
                if signal.getsignal(signum) is handler and handler.calls == handler.seen:
                    _exit_from_watcher(name, 128 + signum, where)


def _handled(handler: _Handler) -> bool:
    """Whether the main thread ran the handler since last asked (as Python handles signals)."""
    if handler.calls > handler.seen:
        handler.seen = handler.calls
        return True
    return False


def _wake_main_thread(signum: int) -> bool:
    """A signal sent to the process may land on another thread (the watcher, a daemon's): the main thread then
    waits on, even in a wait that Python ends for a signal (a lock, a pipe, a sleep: a pool's idle worker), and
    the signal's handler with it. Another signal to the main thread, whose handler does nothing of note
    (MAIN_WAKE: the stacks module's), ends such a wait, and Python then runs the pending handler, once; an MPI
    call blocked in C goes on. Not where the main thread blocks `signum` (its critical section, its sigwait).
    Whether it was sent."""
    if MAIN_WAKE is None or signal.getsignal(MAIN_WAKE[0]) is not MAIN_WAKE[1] or _main_thread_blocks(signum):
        return False
    try:
        signal.pthread_kill(threading.main_thread().ident, MAIN_WAKE[0])
    except (OSError, ValueError):  # (no main thread: the process is ending)
        return False
    return True


def _main_thread_blocks(signum: int) -> bool:
    """Whether the main thread blocks the signal (pthread_sigmask), as the kernel sees it (True where it cannot
    be read: no /proc)."""
    try:
        # (the main thread is the process's first, whose id is the pid; its native_id is the parent's after a
        # fork before Python 3.13.4)
        with open(f"/proc/self/task/{os.getpid()}/status") as status:
            mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigBlk:"))
    except (OSError, ValueError, IndexError, StopIteration):
        return True
    return bool(mask >> (signum - 1) & 1)


def _main_thread_at() -> tuple[traceback.FrameSummary | None, str]:
    """The main thread's user frame and its stack, without how the script was started."""
    return _stack_of(sys._current_frames().get(threading.main_thread().ident))


def _stack_of(frame: Any) -> tuple[traceback.FrameSummary | None, str]:
    """The user's frame in `frame`'s stack, and the stack, without how the script was started."""
    return _users_stack(traceback.extract_stack(frame) if frame is not None else [])


def _users_stack(frames: list[traceback.FrameSummary]) -> tuple[traceback.FrameSummary | None, str]:
    while len(frames) > 1 and frames[0].filename.startswith((PACKAGE_DIR, *_LIBRARY_DIRS)):
        del frames[0]  # runpy, `distvlog launch`'s runner
    return _users_frame(frames), "".join(traceback.format_list(frames)).rstrip() or "  (no Python frame)"


def log_interrupt(exc: KeyboardInterrupt) -> traceback.FrameSummary | None:
    """Where a KeyboardInterrupt (Ctrl-C) was raised in the main thread, logged as a SIGTERM's place is: a W
    record with the stack, without the frames of the logger's own signal handling it was raised from (a
    SIGINT that found the thread blocked in C has its own record, the watcher's). Returns that place."""
    frames = traceback.extract_tb(exc.__traceback__)
    while len(frames) > 1 and frames[-1].filename.startswith(_LOGGER_DIR):
        del frames[-1]
    where, stack = _users_stack(frames)
    with contextlib.suppress(Exception):  # (the interrupt must end the script all the same)
        log_at("warning", f"KeyboardInterrupt{IN_PYTHON}, at (most recent call last):\n{stack}", where)
    return where


def _exit_from_watcher(name: str, status: int, where: traceback.FrameSummary | None) -> None:
    log_at(
        "critical",
        f"{name}: the main thread did not return to Python within {SIGNAL_GRACE_S:g} s (blocked "
        f"in C, such as an MPI call that cannot complete); exited with status {status}",
        where,
    )
    sys.stderr.write(f"distvlog: {name} while the main thread was blocked in C; exiting (see the log)\n")
    os._exit(status)


def _after_fork_in_child() -> None:
    """A forked child (a pool's worker, a DataLoader's) handles its signals as if distvlog had not touched
    them: the handlers ours replaced are back (a pool ends its workers with SIGTERM, which must not log a
    rank's death nor hold their exit), until the child logs and installs ours as itself. It shares its
    parent's wakeup pipe but not the watcher thread: its signals must not wake the parent's watcher."""
    global _watcher_pipe, _signals_installed
    with contextlib.suppress(ValueError):  # (only the main thread may; a child's forking thread is it)
        for signum in _CAUGHT + _DEFAULT_DEATHS:
            handler = signal.getsignal(signum)
            if isinstance(handler, _Handler) and handler.previous is not None:  # (None: a handler of C's)
                signal.signal(signum, handler.previous)
        _signals_installed = False
        if _watcher_pipe is not None:
            signal.set_wakeup_fd(-1)
    if _watcher_pipe is not None:
        os.close(_watcher_pipe[0]), os.close(_watcher_pipe[1])
        _watcher_pipe = None


def _on_open(sink: RankFile) -> None:
    global _timer_pid
    if sys.is_finalizing():  # (a __del__ at shutdown): a thread started now would never run, and start() waits
        sink.buffer_bytes = 0  # for it; no timer, no later flush: each record goes to the file as it comes
        return
    if _timer_pid != os.getpid():  # first file of this process (a forked child has no timer thread)
        threading.Thread(target=_timer_loop, name="distvlog-flush", daemon=True).start()
        _timer_pid = os.getpid()
    _install_signal_handlers()


def _raising_line(exc: BaseException | None, tb: Any) -> traceback.FrameSummary | None:
    """Where the failure started, in the user's code: the innermost frame of the exception and of the causes
    it was raised `from` (the backward engine re-raises a hook's or an op's error as a BackwardError) that is
    the user's (argparse's exit, a numpy error: the user's call is the line to name). A SyntaxError's line
    is the one it names."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return traceback.FrameSummary(exc.filename, exc.lineno or 0, "<module>")
    frames = traceback.extract_tb(tb)
    seen: set[int] = set()
    while (
        exc is not None
        and exc.__cause__ is not None
        and exc.__cause__.__traceback__ is not None
        and id(exc) not in seen
    ):
        seen.add(id(exc))
        exc = exc.__cause__
        frames += traceback.extract_tb(exc.__traceback__)
    return _users_frame(frames)


def _users_frame(frames: list[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    """The innermost frame of the user's code: not distvlog's, not the standard library's or an installed
    package's; else the innermost outside distvlog; else the innermost."""
    outside = [frame for frame in frames if not frame.filename.startswith(PACKAGE_DIR)]
    users = [frame for frame in outside if not frame.filename.startswith(_LIBRARY_DIRS)]
    return (users or outside or frames or [None])[-1]


def log_failure(event: str, exc: BaseException | None, tb: Any, fatal: bool = True) -> None:
    """An F (or E) record where `exc` was raised, to the file only (whoever handles `exc` prints it to
    stderr once), flushed at once. Never raises: it runs while the program is already failing."""
    _failed["logged"] = _failed["logged"] or fatal
    with contextlib.suppress(Exception):  # a record that cannot be written must not hide the failure itself
        log_at("critical" if fatal else "error", event, _raising_line(exc, tb))


def log_at(method: str, event: str, where: traceback.FrameSummary | None) -> None:
    """A record located at `where` (a frame of the user's; None: the logger's own call site), to the file
    only (whoever handles a failure prints it to stderr once), flushed at once."""
    file, line = (os.path.basename(where.filename), where.lineno) if where else (OWN_FILE, OWN_LINE)
    getattr(unechoed_logger("distvlog"), method)(event, file=file, line=line)
    SINK.flush()


def _log_unhandled(kind: str, exc_type: type, exc: BaseException, tb: Any, fatal: bool) -> None:
    text = "".join(traceback.format_exception(exc_type, exc, tb)).rstrip()
    log_failure(f"Unhandled exception in {kind}:\n{text}", exc, tb, fatal)


def _caused_here(exc: BaseException) -> bool:
    """Whether this rank caused `exc`. An exception that names the ranks that caused it (`culprits`, as a
    failed DataParallel check does, whose own record has said on stderr who stopped because of whom) is
    printed by those ranks only, and is an E record, not an F, on the others."""
    culprits = getattr(exc, "culprits", None)
    return not isinstance(culprits, list) or not culprits or IDENTITY.rank in culprits


def install() -> None:
    previous_hook = sys.excepthook
    previous_thread_hook = threading.excepthook

    def excepthook(exc_type: type, exc: BaseException, tb: Any) -> None:
        caused_here = _caused_here(exc)
        if not issubclass(exc_type, KeyboardInterrupt):
            _log_unhandled("main thread", exc_type, exc, tb, fatal=caused_here)
        if caused_here:
            previous_hook(exc_type, exc, tb)
        job.after_unhandled(exc_type)

    def thread_excepthook(args: Any) -> None:
        if args.exc_type is not SystemExit:
            name = args.thread.name if args.thread else "thread"
            _log_unhandled(f"thread {name}", args.exc_type, args.exc_value, args.exc_traceback, fatal=False)
        previous_thread_hook(args)

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
    job.install(
        job.Logger(
            several=lambda: IDENTITY.world_size > 1,
            settle=_settle_before_death,
            log_exit=lambda event, stack: log_at("critical", event, _users_frame(stack)),
            is_own_file=is_distvlog_file,
            flush_wait_s=min(2 * FLUSH_INTERVAL_S, _ABORT_WAIT_MAX_S),
        )
    )
    atexit.register(_at_exit)
    # A multiprocessing worker forked from this process ends with os._exit() right after
    # threading._shutdown(), without atexit: it settles its file there (the registration is inherited by the
    # fork). This process's non-daemon threads may log on after that point: its file stays mapped.
    register_threading_atexit = getattr(threading, "_register_atexit", None)
    if register_threading_atexit is not None:
        installed_pid = os.getpid()
        register_threading_atexit(lambda: SINK.settle() if os.getpid() != installed_pid else SINK.flush())
    SINK.on_open.append(_on_open)
    os.register_at_fork(after_in_child=_after_fork_in_child)
