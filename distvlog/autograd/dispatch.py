"""Running an op: forward on numpy arrays, then — when gradients are wanted — its GradNode, tagged from
this thread's guard state. The one place where forward meets autograd."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import numpy as np

from ..logger import _rules, get_logger
from .guards import STATE
from .node import GradNode, Site, next_seq
from .opdef import OpDef
from .tensor import Tensor

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_log = get_logger("distvlog.autograd.ops")
_NO_ATTRS: dict[str, Any] = {}
PROMOTION_WARNING = "Got different data type, run type promotion automatically, this may cause data type been changed."


def _user_site(with_stack: bool) -> Site:
    """The first frame outside distvlog: the user's forward line (a short walk, not a full stack)."""
    frame = sys._getframe(2)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    return Site(frame.f_code, frame.f_lasti, traceback.extract_stack(frame) if with_stack else None)


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
    from .ops import cast

    return tuple(cast(a, target) if isinstance(a, Tensor) and a._data.dtype != target else a for a in args)


def _saved(op: OpDef, args: tuple, arrays: list, out: np.ndarray, aux: dict | None, edges: list) -> tuple[tuple, tuple]:
    """What the op's backward receives after the gradient, fetched by its save plan; and the versions of the
    parameters among the saved inputs (what optimizers change in place)."""
    saved, versions = [], []
    for kind, i in op.save_plan:
        if kind == "in":
            saved.append(arrays[i])
            if edges[i] is not None and args[i]._node is None:  # a leaf taking gradients: a parameter
                versions.append((args[i], args[i]._version))
        elif kind == "out":
            saved.append(out)
        elif kind == "shape":
            saved.append(np.shape(arrays[i]))
        elif kind == "needs_grad":
            saved.append(tuple(e is not None for e in edges))
        else:
            saved.append(aux[i])
    return tuple(saved), tuple(versions)


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
    if not wanted or out.dtype.kind != "f":  # an int or bool result (a cast) takes no gradient, as in PyTorch
        tensor = Tensor(out)
    else:
        capture = state.capture
        saved, versions = _saved(op, args, arrays, out, aux, edges)
        node = GradNode(
            op,
            next_seq(op.name),
            tuple(edges),
            saved,
            attrs,
            out,
            state.vlog_tag,
            capture,
            _user_site(capture is not None),
            versions,
        )
        if capture is not None:
            capture.add(node)
        tensor = Tensor(out, False, node)
    if _rules.ceiling >= 3 and _log.vlog_is_on(3):
        _log_forward(op, args, tensor)
    return tensor


def _log_forward(op: OpDef, args: tuple, out: Tensor) -> None:
    inputs = ", ".join(
        f"{slot}: {a.name} {a.dtype} {list(a._data.shape)}" if isinstance(a, Tensor) else f"{slot}: {a!r}"
        for slot, a in zip(op.inputs, args)
    )
    site = _user_site(False)  # the record points at the user's forward line, not at this module
    _log.vlog(
        3,
        f"Running_AD_API: {op.name} {{ Input: [{inputs}], Output: [out: {out.name}] }}",
        file=site.filename,
        line=site.lineno,
    )
