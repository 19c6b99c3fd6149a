"""Thread-local autograd state: grad mode, the backward-vlog tag, the backward subgraph and forward graph
captures (whose guards live with what they draw, in `graphviz`).

Each forward op reads this state once, when it creates its GradNode, and stores what it found on the node
itself; the backward engine reads only the node. So a guard affects exactly the nodes its own thread
created while it was open, whichever thread later runs backward, and nothing is left behind after it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, Protocol


class BackwardCapture(Protocol):
    """An open capture_backward_subgraph_guard as the nodes made inside keep it (`graphviz.Capture`)."""

    done: bool


class OpRecorder(Protocol):
    """An open capture_fwd_graph_guard as the ops run inside see it (`graphviz.OpRecorder`)."""

    def record(self, op: Any, args: tuple, out: Any, inplace: bool = False) -> None: ...


class _State(threading.local):
    """What the open guards of this thread say (read by every op: plain attributes), and the guards
    themselves, innermost last."""

    grad_enabled: bool = True
    vlog_tag: int | None = None  # the innermost open backward_vlog_guard's level
    capture: BackwardCapture | None = None  # the innermost open capture_backward_subgraph_guard
    forward_capture: OpRecorder | None = None  # the innermost open capture_fwd_graph_guard

    def __init__(self) -> None:
        self.open: dict[str, list[list]] = {"grad_enabled": [], "vlog_tag": [], "capture": [], "forward_capture": []}

    def forward_captures(self) -> list[OpRecorder]:
        """Every open capture_fwd_graph_guard of this thread: an op run in a nested one is in each."""
        return [entry[0] for entry in self.open["forward_capture"]]


STATE = _State()
_UNSET = {"grad_enabled": True, "vlog_tag": None, "capture": None, "forward_capture": None}


class Setting(contextlib.ContextDecorator):
    """A guard setting `name` for the thread that opens it. Guards form a stack, and closing one removes it
    from the stack wherever it is: a generator suspended inside a guard and closed after a guard opened
    later (or in another thread) leaves the setting to the guards still open, not to a value it saw at
    entry. A class, not a generator: `no_grad()` wraps every optimizer step."""

    def __init__(self, name: str, value: object) -> None:
        self.name, self.value = name, value

    def _recreate_cm(self) -> Setting:  # as a decorator: each call its own guard (calls may nest or overlap)
        return Setting(self.name, self.value)

    def __enter__(self) -> None:
        self.state = state = STATE.__dict__  # this thread's, also when the guard is closed from another thread
        self.entry = entry = [self.value]  # (its identity marks this guard)
        state["open"][self.name].append(entry)
        state[self.name] = self.value

    def __exit__(self, *exc: object) -> None:
        state, name, entry = self.state, self.name, self.entry
        stack = state["open"][name]
        if stack and stack[-1] is entry:
            stack.pop()
        else:
            stack[:] = [e for e in stack if e is not entry]
        state[name] = stack[-1][0] if stack else _UNSET[name]


def _check_level(level: object) -> int:
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"backward_vlog_guard level must be an int, got {type(level).__name__} {level!r}")
    return level


@contextlib.contextmanager
def backward_vlog_guard(level: int) -> Iterator[None]:
    """Tag the GradNodes (and leaf tensors) this thread creates inside with `level`: when backward runs
    them, everything they print is logged at exactly that level, whatever the global verbosity."""
    with Setting("vlog_tag", _check_level(level)):
        yield


def no_grad() -> Setting:
    """Run ops without recording GradNodes (evaluation, optimizer updates); `@no_grad()` on a function too."""
    return Setting("grad_enabled", False)


def is_grad_enabled() -> bool:
    return STATE.grad_enabled


class _OpenForwardCaptures:
    """How many capture_fwd_graph_guards are open in all threads: while none is, an op checks one plain
    number instead of reading its thread's state (a thread-local read costs as much as the check of the
    version, the name and the tags together)."""

    def __init__(self) -> None:
        self.count, self._lock = 0, threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.count += n


FORWARD_CAPTURES = _OpenForwardCaptures()
