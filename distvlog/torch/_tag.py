"""The tag a guard puts on a torch autograd node (in `node.metadata`), and its Paddle-style name."""

from __future__ import annotations

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

    __slots__ = ("level", "op", "seq", "name", "torch_name", "site")

    def __init__(self, level: int | None, torch_name: str, site: Site | None) -> None:
        kind = _kinds.get(torch_name)
        if kind is None:  # `torch::autograd::CopySlices`: CopySlices, op set_value
            kind = _kinds[torch_name] = (torch_name.rsplit("::", 1)[-1], _names.paddle_op(torch_name))
        self.level, self.site = level, site
        self.torch_name, op = kind
        self.op = op
        seq = self.seq = _names.next_seq(op)
        self.name = f"{op}{seq}GradNode"


class _Silent:
    """The tag of a node made under a guard whose level prints nothing (an outer guard must not take it)."""

    level = 0


SILENT = _Silent()


def tag_of(node: Any) -> Tag | None:
    """The tag a guard put on a torch node, None if it is untagged or silent."""
    tag = node.metadata.get(KEY) if node is not None else None
    return tag if type(tag) is Tag else None
