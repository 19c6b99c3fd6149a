"""Ops that move elements without changing them: reshape, transpose, indexing."""

from __future__ import annotations

import numpy as np

from ..opdef import op


def _getitem_bwd(g, shape, index):
    grad = np.zeros(shape, dtype=g.dtype)
    np.add.at(grad, index, g)  # repeated indices accumulate
    return (grad,)


RESHAPE = op(
    "reshape", "x", lambda x, shape: np.reshape(x, shape), lambda g, xs, shape: (np.reshape(g, xs),), saves="x.shape"
)
TRANSPOSE = op(
    "transpose", "x", lambda x, perm: np.transpose(x, perm), lambda g, perm: (np.transpose(g, np.argsort(perm)),)
)
GETITEM = op("slice", "x", lambda x, index: x[index], _getitem_bwd, saves="x.shape")
