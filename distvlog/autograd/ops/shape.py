"""Ops that move elements without changing them: reshape, transpose, indexing."""

from __future__ import annotations

import math

import numpy as np

from ..opdef import op


def _getitem_bwd(g, shape, index):
    grad = np.zeros(shape, dtype=g.dtype)
    np.add.at(grad, index, g)  # repeated indices accumulate
    return (grad,)


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
