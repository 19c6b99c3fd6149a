"""The tag a guard puts on a torch autograd node (in `node.metadata`), and its Paddle-style name."""

from __future__ import annotations

import threading
from typing import Any

from ..nodelog import Site
from . import _names

KEY = "distvlog"  # the tag's key in node.metadata
CAPTURED = "distvlog.capture"  # the key of the capture guard that captured a node
_kinds: dict[str, tuple[str, str]] = {}  # torch's node name -> (its short name, its Paddle op)


class Tag:
    """What a guard put on a node: the level it logs at (None: the engine's, for a node hooked while that
    logs) and, when that is 3 or more, its Paddle-style name, torch's name and the user's forward line. Holds
    nothing of the graph (no cycle through the node)."""

    __slots__ = ("level", "op", "seq", "name", "torch_name", "site", "caller")

    def __init__(self, level: int | None, torch_name: str, site: Site | None) -> None:
        kind = _kinds.get(torch_name)
        if kind is None:  # `torch::autograd::CopySlices`: CopySlices, op set_value
            kind = _kinds[torch_name] = (torch_name.rsplit("::", 1)[-1], _names.paddle_op(torch_name))
        self.level, self.site = level, site
        self.caller: Caller | None = None  # level None: the thread whose backward hooked it
        self.torch_name, op = kind
        self.op = op
        seq = self.seq = _names.next_seq(op)
        self.name = f"{op}{seq}GradNode"


class Caller:
    """A thread's engine level as it last set it, readable from autograd's device threads (which run CUDA
    backward passes apart from the thread that called backward, and whose own rules are not that thread's)."""

    __slots__ = ("level",)

    def __init__(self) -> None:
        self.level = 0


_callers = threading.local()


def caller_here() -> Caller:
    """This thread's `Caller`."""
    caller = getattr(_callers, "caller", None)
    if caller is None:
        caller = _callers.caller = Caller()
    return caller


def engine_level(caller: Caller | None, level_here: Any) -> int:
    """The engine level an untagged node logs at: its backward's calling thread's. A node runs in that thread
    (on CPU: `level_here()`), or on an autograd device thread, which Python sees as a foreign thread: then the
    level of the thread that hooked it when its backward began."""
    if caller is not None and isinstance(threading.current_thread(), threading._DummyThread):
        return caller.level
    return level_here()


class _Silent:
    """The tag of a node made under a guard whose level prints nothing (an outer guard must not take it)."""

    level = 0


SILENT = _Silent()


def tag_of(node: Any) -> Tag | None:
    """The tag a guard put on a torch node, None if it is untagged or silent."""
    tag = node.metadata.get(KEY) if node is not None else None
    return tag if type(tag) is Tag else None
