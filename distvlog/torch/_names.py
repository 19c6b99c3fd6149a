"""Paddle-style names for torch's autograd nodes: `MulBackward0` -> op `multiply`, node `multiply1GradNode`.

A node is numbered when a guard tags it, per op and per process in creation order, as our engine numbers
its own nodes: the same program gives the same names on every rank, so `distvlog diff` lines nodes up across
ranks by name. Torch's own name stays on every record of the node (field `torch_node`).
"""

from __future__ import annotations

import itertools
import re

# Torch's node names whose Paddle op has another name. Any other `FooBarBackwardN` becomes `foo_bar`.
_PADDLE_OPS = {
    "Mul": "multiply",
    "Sub": "subtract",
    "Rsub": "subtract",
    "Div": "divide",
    "Mm": "matmul",
    "Bmm": "matmul",
    "Mv": "matmul",
    "Dot": "matmul",
    "T": "transpose",
    "Permute": "transpose",
    "View": "reshape",
    "UnsafeView": "reshape",
    "ReshapeAlias": "reshape",
    "ToCopy": "cast",
    "NllLoss": "nll_loss",
    "NllLoss2D": "nll_loss",
    "NativeBatchNorm": "batch_norm",
    "NativeLayerNorm": "layer_norm",
    "Convolution": "conv",
    "MaxPool2DWithIndices": "max_pool2d",
    "Select": "getitem",
    "Slice": "getitem",
    "Index": "getitem",
    "CopySlices": "set_value",  # an in-place write into a view: `x[0] = 3`, Paddle's set_value
    "Gelu": "gelu",
    "Silu": "silu",
    "Elu": "elu",
    "LeakyRelu": "leaky_relu",
    "Hardswish": "hardswish",
}
# The names of the gradients a node sends (per out-edge) where Paddle's op names its inputs otherwise than
# x, or x and y; and what torch's saved tensors are called in Paddle's dumps.
_SLOTS = {"addmm": ("input", "x", "y"), "set_value": ("x", "value")}
_SAVED = {"self": "x", "other": "y", "mat1": "x", "mat2": "y", "result": "out"}
_BACKWARD = re.compile(r"Backward\d*$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_counters: dict[str, itertools.count] = {}
_ops: dict[str, str] = {}


def paddle_op(torch_name: str) -> str:
    """The Paddle op of a torch node name: `MulBackward0` -> `multiply`, `NativeLayerNormBackward0` ->
    `layer_norm`, a custom Function's `SquareBackward` -> `square`."""
    op = _ops.get(torch_name)
    if op is None:
        stem = _BACKWARD.sub("", torch_name.rsplit("::", 1)[-1]) or torch_name
        op = _ops[torch_name] = _PADDLE_OPS.get(stem) or _CAMEL.sub("_", stem).lower()
    return op


def next_seq(op: str) -> int:
    """The n-th node of `op` tagged in this process gets n (thread-safe: `next` on a count holds the GIL)."""
    counter = _counters.get(op)
    if counter is None:
        counter = _counters.setdefault(op, itertools.count(1))
    return next(counter)


def slot_names(op: str, count: int) -> tuple[str, ...]:
    """The names of a node's `count` out-edges, Paddle's input names: x; x, y; else x0, x1, ..."""
    names = _SLOTS.get(op)
    if names is not None and len(names) == count:
        return names
    return ("x",) if count == 1 else ("x", "y") if count == 2 else tuple(f"x{i}" for i in range(count))


def saved_name(torch_saved: str) -> str:
    """A saved tensor's name in the dumps: torch's `self`/`other` are Paddle's `x`/`y`, `result` is `out`."""
    return _SAVED.get(torch_saved, torch_saved)
