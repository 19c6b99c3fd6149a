"""Reductions with Paddle's (axis, keepdim). Backward spreads the gradient back over the reduced axes."""

from __future__ import annotations

import numpy as np

from ..opdef import op


def _keep(g, axis, keepdim, ndim):
    """The reduced gradient with its reduced axes back as size 1, ready to broadcast."""
    if keepdim or axis is None:
        return np.reshape(g, (1,) * ndim) if axis is None else g
    return np.expand_dims(g, axis)


def _count(shape, axis):
    if axis is None:
        return int(np.prod(shape))
    axes = (axis,) if isinstance(axis, int) else axis
    return int(np.prod([shape[a] for a in axes]))


def _max_bwd(g, x, out, axis, keepdim):
    mask = x == _keep(out, axis, keepdim, x.ndim)
    return (_keep(g, axis, keepdim, x.ndim) * mask / mask.sum(axis=axis, keepdims=True),)  # ties share


SUM = op(
    "sum",
    "x",
    lambda x, axis, keepdim: np.sum(x, axis=axis, keepdims=keepdim),
    lambda g, shape, axis, keepdim: (np.broadcast_to(_keep(g, axis, keepdim, len(shape)), shape),),
    saves="x.shape",
)
MEAN = op(
    "mean",
    "x",
    lambda x, axis, keepdim: np.mean(x, axis=axis, keepdims=keepdim),
    lambda g, shape, axis, keepdim: (
        np.broadcast_to(_keep(g, axis, keepdim, len(shape)) / _count(shape, axis), shape),
    ),
    saves="x.shape",
)
MAX = op("max", "x", lambda x, axis, keepdim: np.max(x, axis=axis, keepdims=keepdim), _max_bwd, saves="x out")
