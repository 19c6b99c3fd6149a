"""Never lose a record: flush on a timer, at exit, on SIGTERM/SIGINT, and log unhandled exceptions.

Exception hooks are installed on import (a crash must reach the file even if nothing was logged yet);
the timer and signal handlers once the file exists. Every hook chains to the one it replaced.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import traceback
from typing import Any

from . import _env
from ._logger import unechoed_logger
from ._sink import SINK, RankFile


_PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "")  # distvlog/
FLUSH_INTERVAL_S = _env.read("DISTVLOG_FLUSH_INTERVAL", _env.seconds, 0.5)
_timer_pid: int | None = None
_signals_installed = False


def _timer_loop() -> None:
    stop = threading.Event()
    while not stop.wait(FLUSH_INTERVAL_S):
        SINK.flush()


def _at_exit() -> None:
    SINK.buffer_bytes = 0  # records logged by later exit hooks go straight to the file
    SINK.flush()


def _chain_to(previous: Any):
    def chain(signum: int, frame: Any) -> None:
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:  # SIG_DFL, or a handler installed outside Python
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
    return chain


def _install_signal_handlers() -> None:
    global _signals_installed
    if _signals_installed or threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGINT):
        chain = _chain_to(signal.getsignal(signum))
        signal.signal(signum, lambda s, f, chain=chain: SINK.flush_for_signal(s, f, chain))
    _signals_installed = True


def _on_open(_sink: RankFile) -> None:
    global _timer_pid
    if _timer_pid != os.getpid():  # first file of this process (a forked child has no timer thread)
        threading.Thread(target=_timer_loop, name="distvlog-flush", daemon=True).start()
        _timer_pid = os.getpid()
    _install_signal_handlers()


def _raising_line(exc: BaseException | None, tb: Any) -> traceback.FrameSummary | None:
    """Where the failure started, in the user's code: the innermost frame outside distvlog of the exception
    and of the causes it was raised `from` (the backward engine re-raises a hook's or an op's error as a
    BackwardError); the innermost frame when all of them are distvlog's."""
    frames = traceback.extract_tb(tb)
    seen: set[int] = set()
    while exc is not None and exc.__cause__ is not None and exc.__cause__.__traceback__ is not None \
            and id(exc) not in seen:
        seen.add(id(exc))
        exc = exc.__cause__
        frames += traceback.extract_tb(exc.__traceback__)
    outside = [frame for frame in frames if not frame.filename.startswith(_PACKAGE_DIR)]
    return (outside or frames)[-1] if frames else None


def log_failure(event: str, exc: BaseException | None, tb: Any, fatal: bool = True) -> None:
    """An F (or E) record where `exc` was raised, to the file only (whoever handles `exc` prints it to
    stderr once), flushed at once. Never raises: it runs while the program is already failing."""
    try:
        where = _raising_line(exc, tb)
        log = unechoed_logger("distvlog")
        (log.critical if fatal else log.error)(event, file=os.path.basename(where.filename) if where else "distvlog",
                                               line=where.lineno if where else 0)
        SINK.flush()
    except Exception:
        pass  # a record that cannot be written must not hide the failure itself


def _log_unhandled(kind: str, exc_type: type, exc: BaseException, tb: Any, fatal: bool) -> None:
    text = "".join(traceback.format_exception(exc_type, exc, tb)).rstrip()
    log_failure(f"Unhandled exception in {kind}:\n{text}", exc, tb, fatal)


def install() -> None:
    previous_hook = sys.excepthook
    previous_thread_hook = threading.excepthook

    def excepthook(exc_type: type, exc: BaseException, tb: Any) -> None:
        if not issubclass(exc_type, KeyboardInterrupt):
            _log_unhandled("main thread", exc_type, exc, tb, fatal=True)
        previous_hook(exc_type, exc, tb)

    def thread_excepthook(args: Any) -> None:
        if args.exc_type is not SystemExit:
            name = args.thread.name if args.thread else "thread"
            _log_unhandled(f"thread {name}", args.exc_type, args.exc_value, args.exc_traceback, fatal=False)
        previous_thread_hook(args)

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
    atexit.register(_at_exit)
    # A multiprocessing worker forked from this process ends with os._exit() right after
    # threading._shutdown(), without atexit: flush there too (the registration is inherited by the fork).
    register_threading_atexit = getattr(threading, "_register_atexit", None)
    if register_threading_atexit is not None:
        register_threading_atexit(SINK.flush)
    SINK.on_open.append(_on_open)
