"""GradNode: one recorded op with its saved tensors, its out-edges (to the nodes of its inputs) and the
tags its creator's thread put on it (vlog level, subgraph capture, forward call site)."""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..nodelog import NodeView, Site
from .opdef import OpDef

if TYPE_CHECKING:
    from .guards import BackwardCapture


class Leaf(Protocol):
    """What a node reads of a tensor (`tensor.Tensor`, which is built on nodes, not the reverse)."""

    name: str
    _data: np.ndarray
    _node: GradNode | None
    _stop_gradient: bool
    _vlog_tag: int | None


_counters: dict[str, itertools.count] = {}


def next_seq(api: str) -> int:
    """Paddle's unique-name counter: the n-th call of `api` in this process gets n (thread-safe)."""
    counter = _counters.get(api)
    if counter is None:
        counter = _counters.setdefault(api, itertools.count(1))
    return next(counter)


class GradNode(NodeView):
    """The backward half of one forward op call."""

    __slots__ = (
        "op",
        "seq",
        "edges",
        "saved",
        "versions",
        "attrs",
        "out_shape",
        "out_dtype",
        "vlog_level",
        "capture",
        "tagged",
        "site",
        "hooks",
        "__weakref__",
    )

    def __init__(
        self,
        op: OpDef,
        seq: int,
        edges: tuple[GradNode | None, ...],
        saved: tuple,
        attrs: dict[str, Any],
        out: np.ndarray,
        vlog_level: int | None,
        capture: BackwardCapture | None,
        site: Site | None,
        versions: tuple[tuple[list[int], int, Leaf | None], ...] = (),
    ) -> None:
        self.op = op
        self.seq = seq
        self.edges = edges  # per input slot: the node its gradient flows to, or None
        self.saved = saved  # None once released by a backward without retain_graph
        self.versions = versions  # per saved tensor: its data's version counter, the version saved, the tensor
        # (None for the node's own output)
        self.attrs = attrs
        self.out_shape = out.shape  # what the gradient arriving here must match
        self.out_dtype = out.dtype
        self.vlog_level = vlog_level
        self.capture = capture
        self.tagged = vlog_level is not None or capture is not None  # what a pass's observers look for
        self.site = site
        self.hooks: list[Callable] | None = None

    @property
    def name(self) -> str:
        return f"{self.op.name}{self.seq}GradNode"

    def changed_input(self) -> str | None:
        """Why this node's saved tensors are no longer what the forward saw, if they are not: one changed in
        place since (an optimizer step between the forward and this backward, `x[1:2] = 3.3`, `x.add_(y)`)
        would give gradients computed from its new values, silently. (PyTorch's version counter; writes
        through `.numpy()` go unseen.)"""
        for counter, version, tensor in self.versions:
            if counter[0] != version:
                what = f"its output {self.out_name}" if tensor is None else f"its input {tensor.name}"
                parameter = tensor is not None and tensor._node is None and not tensor._stop_gradient
                return (
                    f"{what} was changed in place after the forward used it{' (an optimizer step?)' if parameter else ''}"
                    f": version {counter[0]}, saved at {version}; run the forward again first"
                )
        return None

    def __repr__(self) -> str:
        return f"{self.name}(0x{id(self):x})"


ACCUMULATION = OpDef("accumulation", ("grad",), forward=lambda g: g, backward=lambda g: ())


class AccumulationNode(GradNode):
    """GradNodeAccumulation: the end of every path, adding the gradient into a leaf tensor's `.grad`."""

    __slots__ = ("leaf", "producer", "post_hooks", "lock")

    def __init__(self, leaf: Leaf) -> None:
        data = leaf._data
        super().__init__(ACCUMULATION, 0, (), (), {}, data, leaf._vlog_tag, None, None)
        self.leaf = weakref.ref(leaf)
        self.producer: GradNode | None = None  # the node that last sent this leaf a gradient
        self.post_hooks: list[Callable] | None = None  # run after backward() updated `.grad`
        self.lock = threading.Lock()  # held by the engine while it updates `.grad` (passes may run in threads)

    accumulates = True

    @property
    def name(self) -> str:
        return "GradNodeAccumulation"

    @property
    def out_name(self) -> str:
        leaf = self.leaf()
        return leaf.name if leaf is not None else "None"
