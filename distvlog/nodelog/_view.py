"""What the node log and the graph dumps read of a backward node, whichever engine made it: `NodeView`, the
forward call `Site`, and the texts tensors print as (`float32`, `[64, 256]`, `multiply1_out_float64_2x3`)."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

import numpy as np

from ..logger import code_site


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
    accumulates = False  # GradNodeAccumulation: the end of a path, adding a gradient into a leaf

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


class _NotRead:
    """A saved tensor the node log leaves unread: unpacking it is a `saved_tensors_hooks` pack hook's to do
    (activation checkpointing allows one unpack)."""

    def __repr__(self) -> str:
        return "NOT_READ"


NOT_READ = _NotRead()
