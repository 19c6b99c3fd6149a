"""Thread-local autograd state: grad mode, the backward-vlog tag, the subgraph capture.

Each forward op reads this state once, when it creates its GradNode, and stores what it found on the node
itself; the backward engine reads only the node. So a guard affects exactly the nodes its own thread
created while it was open, whichever thread later runs backward, and nothing is left behind after it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import InputError

if TYPE_CHECKING:
    from .graphviz import Capture


class _State(threading.local):
    grad_enabled: bool = True
    vlog_tag: int | None = None  # the innermost open backward_vlog_guard's level
    capture: Capture | None = None  # the innermost open capture_backward_subgraph_guard


STATE = _State()


def _check_level(level: object) -> int:
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"backward_vlog_guard level must be an int, got {type(level).__name__} {level!r}")
    return level


@contextlib.contextmanager
def backward_vlog_guard(level: int) -> Iterator[None]:
    """Tag the GradNodes (and leaf tensors) this thread creates inside with `level`: when backward runs
    them, everything they print is logged at exactly that level, whatever the global verbosity."""
    level = _check_level(level)
    state = STATE
    outer = state.vlog_tag
    state.vlog_tag = level
    try:
        yield
    finally:
        state.vlog_tag = outer


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Run ops without recording GradNodes (evaluation, optimizer updates)."""
    state = STATE
    outer = state.grad_enabled
    state.grad_enabled = False
    try:
        yield
    finally:
        state.grad_enabled = outer


def is_grad_enabled() -> bool:
    return STATE.grad_enabled


@contextlib.contextmanager
def capture_backward_subgraph_guard(dump_dir_path: str | Path, need_dump_grad_tensors: bool = False) -> Iterator[None]:
    """Capture the GradNodes created inside; the next backward that runs them writes the subgraph to
    `dump_dir_path` (Graphviz files, forward call stacks and, when asked, the gradients)."""
    from .graphviz import Capture

    path = Path(dump_dir_path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"capture_backward_subgraph_guard: cannot create {path}: {exc.strerror}") from None
    state = STATE
    outer = state.capture
    state.capture = Capture(path, need_dump_grad_tensors)
    try:
        yield
    finally:
        state.capture = outer
