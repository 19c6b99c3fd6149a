"""The op functions, with Paddle's names and signatures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..._errors import refuse_unsupported
from ..dispatch import apply
from ..tensor import Tensor
from . import math as _m
from . import nn as _n
from . import reduce as _r
from . import shape as _s


def _named(t: Tensor, name: str | None) -> Tensor:
    if name is not None:
        t._name = name
    return t


def _axis(axis: int | Sequence[int] | None) -> int | tuple[int, ...] | None:
    return axis if axis is None or isinstance(axis, int) else tuple(axis)


def add(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _named(apply(_m.ADD, (x, y)), name)


def subtract(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _named(apply(_m.SUBTRACT, (x, y)), name)


def multiply(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _named(apply(_m.MULTIPLY, (x, y)), name)


def divide(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _named(apply(_m.DIVIDE, (x, y)), name)


def matmul(
    x: Tensor, y: Tensor, transpose_x: bool = False, transpose_y: bool = False, name: str | None = None
) -> Tensor:
    attrs = {"transpose_x": transpose_x, "transpose_y": transpose_y} if transpose_x or transpose_y else {}
    return _named(apply(_m.MATMUL, (x, y), attrs), name)


def neg(x: Tensor, name: str | None = None) -> Tensor:
    return _named(apply(_m.NEG, (x,)), name)


def pow(x: Tensor | float, y: float | Tensor, name: str | None = None) -> Tensor:
    """`x ** y`. A number exponent is an attribute (Paddle's `pow`); a tensor exponent, or a number base
    (`2.0 ** t`), is an input with its own gradient (Paddle's `elementwise_pow`)."""
    if isinstance(x, Tensor) and not isinstance(y, (Tensor, np.ndarray)):
        return _named(apply(_m.POW, (x,), {"y": y}), name)
    return _named(apply(_m.ELEMENTWISE_POW, (x, y)), name)


def exp(x: Tensor, name: str | None = None) -> Tensor:
    return _named(apply(_m.EXP, (x,)), name)


def log(x: Tensor, name: str | None = None) -> Tensor:
    return _named(apply(_m.LOG, (x,)), name)


def sin(x: Tensor, name: str | None = None) -> Tensor:
    return _named(apply(_m.SIN, (x,)), name)


def cos(x: Tensor, name: str | None = None) -> Tensor:
    return _named(apply(_m.COS, (x,)), name)


def tanh(x: Tensor, name: str | None = None) -> Tensor:
    return _named(apply(_m.TANH, (x,)), name)


def cast(x: Tensor, dtype: Any) -> Tensor:
    return apply(_m.CAST, (x,), {"dtype": np.dtype(dtype)})


def sum(x: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, name: str | None = None) -> Tensor:
    return _named(apply(_r.SUM, (x,), {"axis": _axis(axis), "keepdim": keepdim}), name)


def mean(x: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, name: str | None = None) -> Tensor:
    return _named(apply(_r.MEAN, (x,), {"axis": _axis(axis), "keepdim": keepdim}), name)


def max(x: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, name: str | None = None) -> Tensor:
    return _named(apply(_r.MAX, (x,), {"axis": _axis(axis), "keepdim": keepdim}), name)


def reshape(x: Tensor, shape: Sequence[int], name: str | None = None) -> Tensor:
    shape = tuple(x.shape[i] if s == 0 else int(s) for i, s in enumerate(shape))  # Paddle: 0 keeps that dim
    return _named(apply(_s.RESHAPE, (x,), {"shape": shape}), name)


def _permutation(perm: Sequence[int], ndim: int) -> tuple[int, ...]:
    """`perm` with negative axes counted from the end, as the op records it: its backward inverts it with
    argsort, which gives the inverse only of a permutation of range(ndim) (argsort([-1, 0]) is [0, 1])."""
    axes = tuple(a + ndim if a < 0 else a for a in map(int, perm))
    if sorted(axes) != list(range(ndim)):
        raise ValueError(
            f"transpose: perm must be a permutation of the {ndim} axes of x (negative counts from "
            f"the end), got perm={list(perm)}"
        )
    return axes


def transpose(x: Tensor, perm: Sequence[int], name: str | None = None) -> Tensor:
    return _named(apply(_s.TRANSPOSE, (x,), {"perm": _permutation(perm, x.ndim)}), name)


def getitem(x: Tensor, index: Any) -> Tensor:
    def plain(i: Any) -> Any:
        return i._data if isinstance(i, Tensor) else i

    index = tuple(map(plain, index)) if isinstance(index, tuple) else plain(index)
    return apply(_s.GETITEM, (x,), {"index": index})


# -- nn.functional ------------------------------------------------------------------------------------
def relu(x: Tensor, name: str | None = None) -> Tensor:
    return _named(apply(_n.RELU, (x,)), name)


def sigmoid(x: Tensor, name: str | None = None) -> Tensor:
    return _named(apply(_n.SIGMOID, (x,)), name)


def softmax(x: Tensor, axis: int = -1, dtype: Any = None, name: str | None = None) -> Tensor:
    x = x if dtype is None else cast(x, dtype)
    return _named(apply(_n.SOFTMAX, (x,), {"axis": axis}), name)


def log_softmax(x: Tensor, axis: int = -1, dtype: Any = None, name: str | None = None) -> Tensor:
    x = x if dtype is None else cast(x, dtype)
    return _named(apply(_n.LOG_SOFTMAX, (x,), {"axis": axis}), name)


def cross_entropy(
    input: Tensor,
    label: Tensor,
    weight: Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    soft_label: bool = False,
    axis: int = -1,
    use_softmax: bool = True,
    label_smoothing: float = 0.0,
    name: str | None = None,
) -> Tensor:
    """Softmax cross-entropy with integer labels over the last axis, fused and numerically stable."""
    refuse_unsupported(
        "cross_entropy",
        weight=weight is not None and "a tensor",
        soft_label=soft_label,
        axis=axis not in (-1, input.ndim - 1) and axis,
        use_softmax=not use_softmax and "False",
        label_smoothing=label_smoothing != 0 and label_smoothing,
    )
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return _named(apply(_n.CROSS_ENTROPY, (input, label), {"ignore_index": ignore_index, "reduction": reduction}), name)


def mse_loss(input: Tensor, label: Tensor, reduction: str = "mean", name: str | None = None) -> Tensor:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"mse_loss: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return _named(apply(_n.MSE_LOSS, (input, label), {"reduction": reduction}), name)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, name: str | None = None) -> Tensor:
    """`x @ weight + bias` as one op; weight is [in_features, out_features] as in Paddle."""
    if bias is None:
        return matmul(x, weight, name=name)
    return _named(apply(_n.LINEAR, (x, weight, bias)), name)


def dropout(
    x: Tensor,
    p: float = 0.5,
    axis: int | Sequence[int] | None = None,
    training: bool = True,
    mode: str = "upscale_in_train",
    name: str | None = None,
) -> Tensor:
    refuse_unsupported("dropout", axis=axis, mode=mode != "upscale_in_train" and mode)
    if not 0 <= p < 1:
        raise ValueError(f"dropout: p must be in [0, 1), got {p}")
    if not training or p == 0:
        return x
    return _named(apply(_n.DROPOUT, (x,), {"p": p}), name)
