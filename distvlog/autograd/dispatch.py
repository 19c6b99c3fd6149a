"""Running an op: forward on numpy arrays, then — when gradients are wanted — its GradNode, tagged from
this thread's guard state. The one place where forward meets autograd."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..logger import PACKAGE_DIR, get_logger, vlog_rules
from . import flags
from .guards import FORWARD_CAPTURES, STATE
from .node import GradNode, Site, next_seq
from .opdef import CAST, OpDef
from .tensor import Tensor

_log = get_logger("distvlog.autograd.ops")
_NO_ATTRS: dict[str, Any] = {}
PROMOTION_WARNING = "Got different data type, run type promotion automatically, this may cause data type been changed."


def _user_site(with_stack: bool, skip: int = 2) -> Site:
    """The first frame outside distvlog: the user's forward line (a short walk, not a full stack), starting
    `skip` frames up (past this function and its caller, at least)."""
    frame = sys._getframe(skip)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(PACKAGE_DIR):
        frame = frame.f_back
    # (built in place without its stack: this runs for every node an op creates)
    return Site.at(frame, with_stack=True) if with_stack else Site(frame.f_code, frame.f_lasti)


_WEAK = (int, float, bool, type(None))  # Python scalars take the tensors' dtype, as in Paddle; None: no operand


def _promote(op: OpDef, args: tuple) -> tuple:
    """Make an op's operands agree on a dtype. All tensors of one dtype, with Python scalars: nothing to do.
    Otherwise numpy arrays count as tensors and numpy scalars as Python scalars; float32 with float64 casts
    the float32 tensors to float64 (recorded `cast` ops) with one warning; other mixes are an error."""
    first = None
    for a in args:
        if isinstance(a, Tensor):
            dtype = a._data.dtype
            if first is None:
                first = dtype
            elif dtype is not first and dtype != first:  # `is`: numpy's built-in dtypes are singletons
                break
        elif type(a) not in _WEAK:
            break
    else:
        return args
    args = tuple(
        Tensor(a)
        if isinstance(a, np.ndarray) and a.ndim
        else a.item()
        if isinstance(a, (np.generic, np.ndarray))
        else a
        for a in args
    )
    dtypes = {a._data.dtype for a in args if isinstance(a, Tensor)}
    if len(dtypes) < 2:
        return args
    if any(d.kind != "f" for d in dtypes):
        names = " and ".join(sorted(d.name for d in dtypes))
        raise TypeError(
            f"{op.name}: cannot combine {names}; only floating types are promoted automatically, cast with .astype()"
        )
    site = _user_site(False)
    _log.warning(PROMOTION_WARNING, file=site.filename, line=site.lineno)
    target = np.result_type(*dtypes)
    return tuple(_cast(a, target) if isinstance(a, Tensor) and a._data.dtype != target else a for a in args)


def _record(
    op: OpDef,
    args: tuple,
    arrays: list,
    edges: list,
    out: Tensor,
    aux: dict | None,
    attrs: dict[str, Any],
    inplace: bool = False,
) -> GradNode:
    """The GradNode of one op call, tagged from this thread's guards, holding what its backward needs and
    the version of every saved tensor (any of them may be changed in place before the backward reads it).

    In place, the op wrote into its first input: what the backward needs of that input's old values is
    saved as a copy, and its output is a fresh array nobody else holds."""
    saved, versions, old = [], [], None
    for kind, i in op.save_plan:
        if kind == "in" or kind == "out":
            t = args[i] if kind == "in" else out
            if inplace and (kind == "out" or t is args[0]):
                # in place, the output is fresh (nobody else holds it) and the input overwritten: a copy of it
                if kind == "in" and old is None:
                    old = arrays[0].copy()
                saved.append(out._data if kind == "out" else old)
                continue
            saved.append(arrays[i] if kind == "in" else out._data)
            if isinstance(t, Tensor):
                # the counter of its data (shared with views), the version now, and the tensor an error names
                # (not the output: it holds the node)
                root = t if t._base is None else t._base
                counter = root._vc
                if counter is None:
                    counter = root._vc = [0]
                versions.append((counter, counter[0], t if kind == "in" else None))
        elif kind == "shape":
            saved.append(np.shape(arrays[i]))
        elif kind == "needs_grad":
            saved.append(tuple(e is not None for e in edges))
        else:
            saved.append(aux[i])
    state = STATE
    capture = state.capture
    node = GradNode(
        op,
        next_seq(op.name),
        tuple(edges),
        tuple(saved),
        attrs,
        out._data,
        state.vlog_tag,
        capture,
        _user_site(capture is not None or flags.CALL_STACK_LEVEL >= 3, 3),  # (past apply)
        tuple(versions),
    )
    if capture is not None:
        capture.add(node)
    return node


def _viewed(args: tuple, base: object) -> Tensor | None:
    """The tensor whose data an op's output views (numpy returned a view of an input's array: reshape,
    transpose, basic indexing), as the root of all views of that data."""
    for a in args:
        if isinstance(a, Tensor):
            data = a._data
            if data is base or data.base is base:
                return a if a._base is None else a._base
    return None


def apply(op: OpDef, args: tuple, attrs: dict[str, Any] = _NO_ATTRS) -> Tensor:
    """Run `op` on `args` (tensors or Python scalars) and record its GradNode if any input needs a gradient."""
    if op.promote:
        args = _promote(op, args)
    state = STATE
    record = state.grad_enabled  # under no_grad no input gets an edge (nor a leaf its accumulation node)
    arrays, edges, wanted = [], [], False  # per input: its array, and the node its gradient flows to
    for a, differentiable in zip(args, op.differentiable):
        if not isinstance(a, Tensor):
            arrays.append(a)
            edges.append(None)
            continue
        arrays.append(a._data)
        if differentiable and record and not a._stop_gradient:
            edges.append(a._node or a._grad_node())
            wanted = True
        else:
            edges.append(None)
    result = op.forward(*arrays, **attrs)
    out, aux = result if op.aux else (result, None)
    if type(out) is not np.ndarray:
        out = np.asarray(out)
    tensor = Tensor(out)
    if out.base is not None:
        tensor._base = _viewed(args, out.base)
    if wanted and out.dtype.kind == "f":  # an int or bool result (a cast) takes no gradient, as in PyTorch
        tensor._node = _record(op, args, arrays, edges, tensor, aux, attrs)
        tensor._stop_gradient = False
    if FORWARD_CAPTURES.count and state.forward_capture is not None:
        for capture in state.forward_captures():
            capture.record(op, args, tensor)
    if vlog_rules.ceiling >= 3 and _log.vlog_is_on(3):
        _log_forward(op, args, tensor)
    return tensor


def _cast(x: Tensor, dtype: np.dtype) -> Tensor:
    """A recorded cast, as `x.astype(dtype)` would be: promotion casts get their own GradNode."""
    return apply(CAST, (x,), {"dtype": dtype})


def apply_inplace(op: OpDef, args: tuple, attrs: dict[str, Any] = _NO_ATTRS) -> Tensor:
    """Run `op` and write its result into its first input, a tensor (Paddle's in-place APIs, `x.add_(y)`):
    x keeps its dtype and shape (other operands are cast to its dtype) and its version goes up, so a
    backward that saved its old values refuses to run. When a gradient is wanted the op is recorded as x's
    new producer, as Paddle does; otherwise only x's data changes (what optimizers do, under no_grad)."""
    x = args[0]
    if not isinstance(x, Tensor):
        raise TypeError(f"{op.name}_: x must be a Tensor, got {type(x).__name__}")
    if STATE.grad_enabled and any(
        isinstance(a, Tensor) and not a._stop_gradient and differentiable
        for a, differentiable in zip(args, op.differentiable)
    ):
        return _record_inplace(op, args, attrs)
    data = x._data
    if len(args) == 2:  # x op= y (an optimizer's update, for every parameter: no list, no loop)
        y = args[1]
        operands: tuple = (data, y._data if isinstance(y, Tensor) else y)
    else:
        operands = (data, *[a._data if isinstance(a, Tensor) else a for a in args[1:]])
    try:
        if op.ufunc:
            op.forward(*operands, data)  # (out, positional: numpy parses it faster)
        else:
            op.write(data, *operands, **attrs)
    except (ValueError, TypeError, IndexError) as exc:  # (numpy's own subclasses take other arguments)
        kind = next(k for k in (TypeError, IndexError, ValueError) if isinstance(exc, k))
        raise kind(f"{op.name}_ into {x.name} {x.dtype} {x.shape}: {exc}") from None
    x._bump_version()
    if FORWARD_CAPTURES.count or vlog_rules.ceiling >= 3:
        _traced(op, args, x)
    return x


def _traced(op: OpDef, args: tuple, x: Tensor) -> None:
    """An in-place op, for the forward graph captures and the forward op log."""
    if STATE.forward_capture is not None:
        for capture in STATE.forward_captures():
            capture.record(op, args, x, inplace=True)
    if vlog_rules.ceiling >= 3 and _log.vlog_is_on(3):
        _log_forward(op, args, x, inplace=True)


def _record_inplace(op: OpDef, args: tuple, attrs: dict[str, Any]) -> Tensor:
    x = args[0]
    if x._node is None and not x._stop_gradient:
        raise RuntimeError(
            f"{op.name}_: {x.name} is a leaf tensor that requires grad, which cannot change in place while "
            "gradients are recorded (its gradient would be of the new values); do it under no_grad(), as "
            "optimizers do"
        )
    if x._base is not None:
        raise RuntimeError(
            f"{op.name}_: {x.name} shares its data with {x._base.name}, and a recorded in-place change of "
            f"shared data would give {x._base.name} wrong gradients; change a copy (x.clone()) instead"
        )
    dtype = x._data.dtype
    if dtype.kind != "f":
        raise TypeError(f"{op.name}_: {x.name} is {dtype}, which cannot take the gradient its operand needs")
    args = (x, *(_cast(a, dtype) if isinstance(a, Tensor) and a._data.dtype != dtype else a for a in args[1:]))
    arrays, edges = [], []
    for a, differentiable in zip(args, op.differentiable):
        if isinstance(a, Tensor):
            arrays.append(a._data)
            edges.append((a._node or a._grad_node()) if differentiable and not a._stop_gradient else None)
        else:
            arrays.append(a)
            edges.append(None)
    result = op.forward(*arrays, **attrs)
    out, aux = result if op.aux else (result, None)
    out = np.asarray(out)
    if out.shape != x._data.shape:
        raise ValueError(
            f"{op.name}_: the result has shape {list(out.shape)}, {x.name} {x.shape}: an in-place op cannot "
            "change its tensor's shape"
        )
    fresh = Tensor(out if out.dtype == dtype else out.astype(dtype))
    node = _record(op, args, arrays, edges, fresh, aux, attrs, inplace=True)
    if x._name is None:
        x._name = x.name  # the tensor keeps its name; its producer is now this op's node
    np.copyto(x._data, fresh._data)
    x._bump_version()
    x._node, x._stop_gradient = node, False
    _traced(op, args, x)
    return x


def _log_forward(op: OpDef, args: tuple, out: Tensor, inplace: bool = False) -> None:
    inputs = ", ".join(
        f"{slot}: {a.name} {a.dtype} {list(a._data.shape)}" if isinstance(a, Tensor) else f"{slot}: {a!r}"
        for slot, a in zip(op.inputs, args)
    )
    site = _user_site(False)  # the record points at the user's forward line, not at this module
    _log.vlog(
        3,
        f"Running_AD_API: {op.name}{'_' if inplace else ''} {{ Input: [{inputs}], Output: [out: {out.name}] }}",
        file=site.filename,
        line=site.lineno,
    )
