"""Ops that move elements without changing them: reshape, flatten, transpose, indexing and slice assignment.

Indexing is numpy's, as Paddle's is: basic (ints, slices, `...`, None; negative counts from the end) and
advanced (integer arrays, boolean masks, tensors of either). Slice assignment casts the value to the
tensor's dtype and broadcasts it to the selected shape.
"""

from __future__ import annotations

import math

import numpy as np

from ..opdef import op


def is_basic(index) -> bool:
    """Only ints, slices, `...` and None: a view, and no element is selected twice."""
    parts = index if isinstance(index, tuple) else (index,)
    return all(isinstance(i, (int, np.integer, slice, type(None), type(Ellipsis))) for i in parts)


def _getitem_bwd(g, shape, index):
    grad = np.zeros(shape, dtype=g.dtype)
    if is_basic(index):
        grad[index] = g
    else:
        np.add.at(grad, index, g)  # repeated indices accumulate
    return (grad,)


def _set_value(x, value, index):
    out = x.copy()
    out[index] = value
    return out


def _set_value_bwd(g, shape, needs_grad, index):
    """x's gradient is g where the value did not land; the value's is g where it landed, and where an
    advanced index selects an element twice, only the assignment that won (numpy: the last) gets it."""
    gx = gv = None
    if needs_grad[0]:
        gx = g.copy()
        gx[index] = 0
    if needs_grad[1]:
        gv = g[index]
        if not is_basic(index):
            order = np.arange(gv.size).reshape(gv.shape)
            last = np.full(shape, -1)
            last[index] = order
            gv = np.where(last[index] == order, gv, 0)
    return gx, gv


def _flatten(x, start_axis, stop_axis):
    """Axes start_axis..stop_axis (non-negative, inclusive) merged into one."""
    return np.reshape(
        x, x.shape[:start_axis] + (math.prod(x.shape[start_axis : stop_axis + 1]),) + x.shape[stop_axis + 1 :]
    )


def _to_input_shape(g, x_shape, **_attrs):
    return (np.reshape(g, x_shape),)


RESHAPE = op("reshape", "x", lambda x, shape: np.reshape(x, shape), _to_input_shape, saves="x.shape")
FLATTEN = op("flatten", "x", _flatten, _to_input_shape, saves="x.shape")
TRANSPOSE = op(
    "transpose", "x", lambda x, perm: np.transpose(x, perm), lambda g, perm: (np.transpose(g, np.argsort(perm)),)
)
GETITEM = op("slice", "x", lambda x, index: x[index], _getitem_bwd, saves="x.shape")
SET_VALUE = op(
    "set_value",
    "x value",
    _set_value,
    _set_value_bwd,
    saves="x.shape needs_grad",
    inplace=lambda target, x, value, index: target.__setitem__(index, value),
)
