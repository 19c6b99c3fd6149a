"""GradNode: one recorded op with its saved tensors, its out-edges (to the nodes of its inputs) and the
tags its creator's thread put on it (vlog level, subgraph capture, forward call site)."""

from __future__ import annotations

import itertools
import threading
import traceback
import weakref
from collections.abc import Callable
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..logger import code_site
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


class _Memo(dict):
    """Texts made once per key (a dtype, a shape): a hit is one look-up in C, not a Python call, which is
    most of what a tagged node's lines would otherwise cost. Cleared past 10,000 keys (shapes may vary)."""

    def __init__(self, make: Callable[[Any], str]) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key: Any) -> str:
        if len(self) > 10_000:
            self.clear()
        text = self[key] = self.make(key)
        return text


dtype_name: Callable[[np.dtype], str] = _Memo(lambda dtype: np.dtype(dtype).name).__getitem__  # `float32`
shape_list: Callable[[tuple[int, ...]], str] = _Memo(lambda shape: str(list(shape))).__getitem__  # `[64, 256]`
shape_text: Callable[[tuple[int, ...]], str] = _Memo(lambda shape: "x".join(map(str, shape))).__getitem__  # `64x256`


def tensor_name(api: str, seq: int, dtype: np.dtype, shape: tuple[int, ...]) -> str:
    """`multiply1_out_float64_2x3`; a 0-d tensor ends in `_` (`sum1_out_float64_`)."""
    return f"{api}{seq}_out_{dtype_name(dtype)}_{shape_text(shape)}"


class Site:
    """Where the forward call that created a node is in the user's code (line resolved when asked), and
    the whole forward stack when it was recorded (FLAGS_call_stack_level=3, or a capture guard)."""

    __slots__ = ("code", "lasti", "stack")

    def __init__(self, code: CodeType, lasti: int, stack: tuple[tuple[CodeType, int], ...] | None = None) -> None:
        self.code, self.lasti = code, lasti
        self.stack = stack  # (code, line) per frame, outermost first: the source lines are read when printed

    @classmethod
    def at(cls, frame: FrameType, with_stack: bool = False) -> Site:
        """Where `frame` is now, with (code, line) of it and every frame above it when asked: cheap enough to
        take per op (no source line is read, no frame kept alive)."""
        if not with_stack:
            return cls(frame.f_code, frame.f_lasti)
        stack = []
        caller: FrameType | None = frame
        while caller is not None:
            stack.append((caller.f_code, caller.f_lineno))
            caller = caller.f_back
        return cls(frame.f_code, frame.f_lasti, tuple(reversed(stack)))

    @property
    def filename(self) -> str:
        return code_site(self.code, self.lasti)[1]

    @property
    def lineno(self) -> int:
        return code_site(self.code, self.lasti)[2]

    def __str__(self) -> str:
        _, filename, lineno = code_site(self.code, self.lasti)  # one look-up (a level-5 node asks every pass)
        return f"{filename}:{lineno}"

    def frames(self) -> traceback.StackSummary:
        """The recorded stack, empty when only the line is known."""
        return traceback.StackSummary.from_list(
            [(code.co_filename, line, code.co_name, None) for code, line in self.stack or ()]
        )

    def forward_traceback(self) -> str:
        """The recorded stack as Paddle prints it at FLAGS_call_stack_level=3; "" when only the line is known."""
        if not self.stack:
            return ""
        return "Forward Traceback (most recent call last):\n" + "".join(self.frames().format()).rstrip()


class NodeView:
    """What the node log reads of a node, beyond its own attributes (name, op, seq, edges, saved, attrs, site,
    out_shape, out_dtype): the names its tensors print as. A GradNode is one; the torch adapter shows torch's
    nodes as one."""

    __slots__ = ()
    backend = "numpy"  # what the node log's kernel lines name

    @property
    def in_meta(self) -> tuple[tuple[tuple[int, ...], np.dtype] | None, ...]:
        """Per input slot, the (shape, dtype) its gradient must have: the output of the node it flows to."""
        return tuple(None if e is None else (e.out_shape, e.out_dtype) for e in self.edges)

    @property
    def out_name(self) -> str:
        """The forward output tensor's name, from which its gradient takes `@Grad`."""
        return tensor_name(self.op.name, self.seq, self.out_dtype, self.out_shape)

    def input_name(self, slot: int) -> str:
        edge = self.edges[slot]
        return edge.out_name if edge is not None else "None"


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

    @property
    def name(self) -> str:
        return "GradNodeAccumulation"

    @property
    def out_name(self) -> str:
        leaf = self.leaf()
        return leaf.name if leaf is not None else "None"
