"""The processors every record goes through, each a small callable as structlog expects."""

from __future__ import annotations

import os
import sys
import threading
import time
from types import CodeType
from typing import Any

from ._clock import SKEW_PER_RANK_US
from ._identity import IDENTITY

SEVERITY = {"info": "I", "vlog": "I", "warning": "W", "error": "E", "critical": "F"}


class _ThreadId(threading.local):
    """The native thread id, asked of the OS once per thread (it is a system call)."""

    tid: int | None = None


_thread = _ThreadId()


def _forget_thread_ids() -> None:
    global _thread
    _thread = _ThreadId()  # a forked child's threads have new ids


os.register_at_fork(after_in_child=_forget_thread_ids)
_SKIP_CODES: set[CodeType] = set()  # frames of the logger itself, between the caller and the processors
_basenames: dict[str, str] = {}


def skip_frames_of(*functions: Any) -> None:
    """Declare logger-internal functions whose frames the callsite look-up steps over."""
    _SKIP_CODES.update(f.__code__ for f in functions)


def add_callsite(_logger: object, _method: str, ed: dict[str, Any]) -> dict[str, Any]:
    """`file` and `line` of the code that called the logger (a fixed-depth look-up, not a stack walk)."""
    if "file" not in ed:
        frame = sys._getframe(3)  # add_callsite <- Logger._emit <- Logger method <- caller
        while frame.f_code in _SKIP_CODES:
            frame = frame.f_back
        path = frame.f_code.co_filename
        base = _basenames.get(path)
        if base is None:
            base = _basenames[path] = os.path.basename(path)
        ed["file"] = base
        ed["line"] = frame.f_lineno
    return ed


def add_record_fields(_logger: object, method: str, ed: dict[str, Any]) -> dict[str, Any]:
    """Timestamp (µs since the epoch), severity, rank, world size and native thread id."""
    if "ts" not in ed:
        ed["ts"] = time.time_ns() // 1000 + IDENTITY.rank * SKEW_PER_RANK_US  # _clock.now_us(), inlined
    if "event" not in ed:
        ed["event"] = ""
    ed["severity"] = SEVERITY[method]
    ident = IDENTITY
    ed["rank"] = ident.rank
    ed["world_size"] = ident.world_size
    tid = _thread.tid
    if tid is None:
        tid = _thread.tid = threading.get_native_id()
    ed["tid"] = tid
    return ed
