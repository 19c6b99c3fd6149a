"""The processor every record goes through first: who, where and when (a small callable, as structlog
expects; one call instead of several because a Python call is the main cost of a log record)."""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import time
from types import CodeType, FrameType
from typing import Any

from ._clock import SKEW_PER_RANK_US
from ._identity import IDENTITY

SEVERITY = {"info": "I", "vlog": "I", "warning": "W", "error": "E", "critical": "F"}
CONTEXT: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("distvlog_context", default={})  # noqa: B039 (never mutated: bind_context sets a new dict)
# Frames of the logger itself, between the caller and the processors, by id: hashing a code object hashes
# its constants, nested functions' code included, on every look-up. The dict holds the codes: ids stay theirs.
_SKIP_CODES: dict[int, CodeType] = {}
# distvlog's own source files start with this (the separator included: `distvlog_examples/` is not ours).
PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")
_sites: dict[tuple[int, int], tuple[CodeType, str, int]] = {}  # (id(code), instruction) -> code, file, line


class _ThreadId(threading.local):
    """The native thread id, asked of the OS once per thread (it is a system call)."""

    def __init__(self) -> None:  # (run in each thread at its first use)
        self.tid = threading.get_native_id()


_thread = _ThreadId()


def _forget_thread_ids() -> None:
    global _thread
    _thread = _ThreadId()  # a forked child's threads have new ids


os.register_at_fork(after_in_child=_forget_thread_ids)


def is_distvlog_file(filename: str) -> bool:
    """Whether a frame's file is distvlog's own: the user's call site is the first frame that is not."""
    return filename.startswith(PACKAGE_DIR)


def skip_frames_of(*functions: Any) -> None:
    """Declare logger-internal functions whose frames the callsite look-up steps over."""
    _SKIP_CODES.update((id(f.__code__), f.__code__) for f in functions)


def code_site(code: CodeType, lasti: int) -> tuple[CodeType, str, int]:
    """(code, file basename, line) of an instruction, cached: decoding the line table (what `f_lineno`
    does on every call) costs more than the rest of a record's bookkeeping. The entry holds the code
    object, so its id is not reused while cached."""
    key = (id(code), lasti)
    site = _sites.get(key)
    if site is None:
        if len(_sites) > 100_000:
            _sites.clear()
        line = next((ln for start, end, ln in code.co_lines() if start <= lasti < end), None)
        site = _sites[key] = (code, os.path.basename(code.co_filename), line or 0)
    return site


def caller_site(frame: FrameType) -> tuple[str, int]:
    """File basename and line of the logging call: the first frame from `frame` out that is not the logger's."""
    while id(frame.f_code) in _SKIP_CODES:
        frame = frame.f_back
    code = frame.f_code
    site = _sites.get((id(code), frame.f_lasti)) or code_site(code, frame.f_lasti)  # the hit inlined
    return site[1], site[2]


def thread_id() -> int:
    """This thread's native id (asked of the OS once per thread)."""
    return _thread.tid


def add_record_fields(_logger: object, method: str, ed: dict[str, Any]) -> dict[str, Any]:
    """Bound context (`bind_context`), the caller's `file`/`line` (a fixed-depth frame look-up, not a stack
    walk), `ts` in µs since the epoch, `severity`, `rank`, `world_size` and the native thread id `tid`.
    A caller's own `ts` (int) and `file` (str) with `line` (int), as the stdlib bridge passes, are kept; of
    another type they are replaced (the glog prefix could not hold them)."""
    ctx = CONTEXT.get()
    if ctx:
        for key, value in ctx.items():
            ed.setdefault(key, value)
    if "file" not in ed or "line" not in ed or type(ed["file"]) is not str or type(ed["line"]) is not int:
        ed["file"], ed["line"] = caller_site(sys._getframe(2))  # this processor <- Logger method <- caller
    if "ts" not in ed or type(ed["ts"]) is not int:  # _clock.now_us(), inlined: a call costs more than this line
        ed["ts"] = time.time_ns() // 1000 + (IDENTITY.rank * SKEW_PER_RANK_US if SKEW_PER_RANK_US else 0)
    ed["severity"] = SEVERITY[method]
    ident = IDENTITY
    ed["rank"] = ident.rank
    ed["world_size"] = ident.world_size
    ed["tid"] = _thread.tid
    return ed
