"""Every thread's Python stack on request, as a record in this rank's own file (format.STACKS_ANSWER): what
`distvlog stacks` and `distvlog watch` ask for, without stopping the rank.

A request is a file in the run directory (format.STACKS_REQUEST) holding its id. A thread of each process
that logs looks at it once a POLL_S (one stat(): nothing measurable) and answers a new one; on the
requester's host, STACKS_WAKE_SIGNAL wakes it at once. The main thread may be blocked in C (an MPI or gloo
collective): Python then runs no signal handler there, but the C-level handler writes the signal to the
wakeup fd, which the logger's signal watcher reads and passes on here (`_lifecycle.WAKE_ON`), and
`sys._current_frames()` reads the main thread's stack from this thread, as such calls release the interpreter
lock while they wait. Whether the main thread runs Python is asked it: a signal whose Python handler runs
there within _PROMPT_S counts one up.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..format import (
    OWN_FILE,
    OWN_LINE,
    STACKS_ANSWER,
    STACKS_ID,
    STACKS_REQUEST,
    STACKS_STATE,
    STACKS_WAKE_SIGNAL,
    STATE_BLOCKED,
    STATE_PYTHON,
)
from . import _lifecycle
from ._logger import unechoed_logger
from ._sink import SINK, RankFile

POLL_S = 1.0
REQUEST_TTL_S = 60.0  # an older request is a past one (a rank that starts later does not answer it)
_PROMPT_S = 0.5  # a main thread that runs Python runs a signal's handler sooner than this (a busy machine too)
_ID = re.compile(rb"[\w.:-]{1,128}")
_OWN_THREADS = "distvlog-"  # the logger's own threads: not the user's, left out of the answer


class _Asked:
    """This process's request watcher: its wake-up, the requests answered, the runs of the main thread's handler."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.wake = threading.Event()
        self.handled = 0  # runs of the signal's handler in the main thread
        self.handler_installed = False
        self.answered: bytes | None = None
        self.seen_mtime = 0


_ASKED = _Asked()


def _handler(_signum: int, _frame: Any) -> None:
    _ASKED.handled += 1
    _ASKED.wake.set()


def _install_handler() -> None:
    """The wake signal's handler, in the main thread, unless someone else's is there (theirs stays: their
    ranks answer at the next poll, and their state is not known)."""
    if threading.current_thread() is not threading.main_thread() or _ASKED.handler_installed:
        return
    if signal.getsignal(STACKS_WAKE_SIGNAL) not in (signal.SIG_DFL, None):
        return
    with contextlib.suppress(ValueError, OSError):
        signal.signal(STACKS_WAKE_SIGNAL, _handler)
        _ASKED.handler_installed = True


def _on_open(sink: RankFile) -> None:
    if sys.is_finalizing() or sink.path is None or _ASKED.pid == os.getpid():
        return
    _ASKED.pid = os.getpid()
    _ASKED.wake = threading.Event()  # (a forked child's own: its parent's thread is not in it)
    _install_handler()
    if _ASKED.handler_installed:
        _lifecycle.WAKE_ON[STACKS_WAKE_SIGNAL] = _ASKED.wake.set
        _lifecycle.MAIN_WAKE = (STACKS_WAKE_SIGNAL, _handler)  # (a wake-up costs a look for a request)
    request = sink.path.parent / STACKS_REQUEST
    threading.Thread(target=_watch, args=(request,), name="distvlog-stacks", daemon=True).start()


def _watch(request: Path) -> None:
    while True:
        _ASKED.wake.wait(POLL_S)
        _ASKED.wake.clear()
        with contextlib.suppress(Exception):  # (this thread must outlive anything; an answer not written is lost)
            asked = _new_request(request)
            if asked is not None:
                _answer(asked)


def _new_request(request: Path) -> str | None:
    """The id of a request not answered yet, None if there is none."""
    try:
        st = os.stat(request)
    except OSError:
        return None
    if st.st_mtime_ns == _ASKED.seen_mtime or time.time() - st.st_mtime > REQUEST_TTL_S:
        return None
    _ASKED.seen_mtime = st.st_mtime_ns
    with open(request, "rb") as f:
        text = f.read(256).strip()
    if not _ID.fullmatch(text) or text == _ASKED.answered:
        return None
    _ASKED.answered = text
    return text.decode()


def _main_state() -> str | None:
    """Whether the main thread runs Python: the handler of a signal sent to it runs there within _PROMPT_S."""
    if signal.getsignal(STACKS_WAKE_SIGNAL) is not _handler:  # (replaced by the user's own since)
        return None
    before = _ASKED.handled
    signal.pthread_kill(threading.main_thread().ident, STACKS_WAKE_SIGNAL)
    deadline = time.monotonic() + _PROMPT_S
    while _ASKED.handled == before and time.monotonic() < deadline:
        time.sleep(0.01)
    return STATE_PYTHON if _ASKED.handled != before else STATE_BLOCKED


def _answer(request_id: str) -> None:
    state = _main_state()
    frames = sys._current_frames()
    threads = sorted(
        (t for t in threading.enumerate() if t.ident in frames and not t.name.startswith(_OWN_THREADS)),
        key=lambda t: t is not threading.main_thread(),
    )
    where = None
    parts = []
    for thread in threads:
        at, stack = _lifecycle._stack_of(frames[thread.ident])
        where = where or at
        parts.append(f"thread {thread.name}:\n{stack}")
    file, line = (os.path.basename(where.filename), where.lineno) if where else (OWN_FILE, OWN_LINE)
    fields = {STACKS_ID: request_id, **({STACKS_STATE: state} if state else {})}
    unechoed_logger("distvlog").info(STACKS_ANSWER + "\n" + "\n".join(parts), file=file, line=line, **fields)
    SINK.flush()


def install() -> None:
    SINK.on_open.append(_on_open)
