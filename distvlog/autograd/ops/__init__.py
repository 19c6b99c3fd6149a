"""The op functions, with Paddle's names and signatures."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import refuse_unsupported
from ..dispatch import apply, apply_inplace
from ..opdef import CAST, OpDef
from ..tensor import Tensor
from . import conv as _c
from . import math as _m
from . import nn as _n
from . import norm as _bn
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
    return apply(CAST, (x,), {"dtype": np.dtype(dtype)})


def sqrt(x: Tensor, name: str | None = None) -> Tensor:
    return _named(apply(_m.SQRT, (x,)), name)


def _scale_attrs(scale: float, bias: float, bias_after_scale: bool, act: Any) -> dict[str, Any]:
    refuse_unsupported("scale", act=act)
    return {"scale": float(scale), "bias": float(bias), "bias_after_scale": bool(bias_after_scale)}


def scale(
    x: Tensor,
    scale: float = 1.0,
    bias: float = 0.0,
    bias_after_scale: bool = True,
    act: Any = None,
    name: str | None = None,
) -> Tensor:
    """`x * scale + bias`, or `(x + bias) * scale` with `bias_after_scale=False` (Paddle's `scale`)."""
    return _named(apply(_m.SCALE, (x,), _scale_attrs(scale, bias, bias_after_scale, act)), name)


def _bounds(min: float | None, max: float | None) -> dict[str, float | None]:
    return {"min": None if min is None else float(min), "max": None if max is None else float(max)}


def clip(x: Tensor, min: float | None = None, max: float | None = None, name: str | None = None) -> Tensor:
    """Values limited to [min, max] (a bound left None is none); the gradient passes strictly inside them."""
    if min is None and max is None:
        return _named(apply(_m.ASSIGN, (x,)), name)
    return _named(apply(_m.CLIP, (x,), _bounds(min, max)), name)


def clone(x: Tensor, name: str | None = None) -> Tensor:
    """A copy of `x` with its own data, through which gradients flow back to `x` (Paddle's `assign`)."""
    return _named(apply(_m.ASSIGN, (x,)), name)


# -- in place: `x` itself changes and its version goes up (see dispatch.apply_inplace) -------------------
def add_(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    return apply_inplace(_m.ADD, (x, y))


def subtract_(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    return apply_inplace(_m.SUBTRACT, (x, y))


def multiply_(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    return apply_inplace(_m.MULTIPLY, (x, y))


def divide_(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    return apply_inplace(_m.DIVIDE, (x, y))


def pow_(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    if isinstance(y, (Tensor, np.ndarray)):
        return apply_inplace(_m.ELEMENTWISE_POW, (x, y))
    return apply_inplace(_m.POW, (x,), {"y": y})


def scale_(
    x: Tensor,
    scale: float = 1.0,
    bias: float = 0.0,
    bias_after_scale: bool = True,
    act: Any = None,
    name: str | None = None,
) -> Tensor:
    return apply_inplace(_m.SCALE, (x,), _scale_attrs(scale, bias, bias_after_scale, act))


def clip_(x: Tensor, min: float | None = None, max: float | None = None, name: str | None = None) -> Tensor:
    if min is None and max is None:
        return x
    return apply_inplace(_m.CLIP, (x,), _bounds(min, max))


def exp_(x: Tensor, name: str | None = None) -> Tensor:
    return apply_inplace(_m.EXP, (x,))


def log_(x: Tensor, name: str | None = None) -> Tensor:
    return apply_inplace(_m.LOG, (x,))


def sqrt_(x: Tensor, name: str | None = None) -> Tensor:
    return apply_inplace(_m.SQRT, (x,))


def tanh_(x: Tensor, name: str | None = None) -> Tensor:
    return apply_inplace(_m.TANH, (x,))


def sin_(x: Tensor, name: str | None = None) -> Tensor:
    return apply_inplace(_m.SIN, (x,))


def cos_(x: Tensor, name: str | None = None) -> Tensor:
    return apply_inplace(_m.COS, (x,))


def fill_(x: Tensor, value: float) -> Tensor:
    return apply_inplace(_m.FILL, (x,), {"value": value})


def zero_(x: Tensor) -> Tensor:
    return apply_inplace(_m.FILL, (x,), {"value": 0})


def sum(x: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, name: str | None = None) -> Tensor:
    return _named(apply(_r.SUM, (x,), {"axis": _axis(axis), "keepdim": keepdim}), name)


def mean(x: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, name: str | None = None) -> Tensor:
    return _named(apply(_r.MEAN, (x,), {"axis": _axis(axis), "keepdim": keepdim}), name)


def max(x: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, name: str | None = None) -> Tensor:
    return _named(apply(_r.MAX, (x,), {"axis": _axis(axis), "keepdim": keepdim}), name)


def reshape(x: Tensor, shape: Sequence[int], name: str | None = None) -> Tensor:
    shape = tuple(x.shape[i] if s == 0 else int(s) for i, s in enumerate(shape))  # Paddle: 0 keeps that dim
    return _named(apply(_s.RESHAPE, (x,), {"shape": shape}), name)


def flatten(x: Tensor, start_axis: int = 0, stop_axis: int = -1, name: str | None = None) -> Tensor:
    """Axes start_axis..stop_axis (inclusive, negative counts from the end) merged into one; a 0-d tensor
    becomes [1], as in Paddle."""
    if x.ndim == 0:
        return reshape(x, [1], name)
    start, stop = (a + x.ndim if a < 0 else a for a in (start_axis, stop_axis))
    if not 0 <= start <= stop < x.ndim:
        raise ValueError(
            f"flatten: need 0 <= start_axis <= stop_axis < {x.ndim} (negative counts from the end), "
            f"got start_axis={start_axis}, stop_axis={stop_axis} for shape {x.shape}"
        )
    return _named(apply(_s.FLATTEN, (x,), {"start_axis": start, "stop_axis": stop}), name)


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


def _index(index: Any) -> Any:
    """An index with its tensors as arrays (integer or boolean: Paddle's tensor indices)."""

    def plain(i: Any) -> Any:
        return i._data if isinstance(i, Tensor) else i

    return tuple(map(plain, index)) if isinstance(index, tuple) else plain(index)


def getitem(x: Tensor, index: Any) -> Tensor:
    return apply(_s.GETITEM, (x,), {"index": _index(index)})


def setitem_(x: Tensor, index: Any, value: Any) -> Tensor:
    """`x[index] = value` (Paddle's set_value): in place, the value cast to x's dtype and broadcast to the
    selected shape; recorded when x or the value needs a gradient, which then flows to both."""
    if isinstance(value, (list, tuple)):
        value = np.asarray(value)
    return apply_inplace(_s.SET_VALUE, (x, value), {"index": _index(index)})


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


def _activation(opdef: OpDef, x: Tensor, name: str | None, **attrs: Any) -> Tensor:
    return _named(apply(opdef, (x,), attrs), name)


def relu6(x: Tensor, name: str | None = None) -> Tensor:
    return _activation(_n.RELU6, x, name)


def leaky_relu(x: Tensor, negative_slope: float = 0.01, name: str | None = None) -> Tensor:
    return _activation(_n.LEAKY_RELU, x, name, negative_slope=negative_slope)


def elu(x: Tensor, alpha: float = 1.0, name: str | None = None) -> Tensor:
    return _activation(_n.ELU, x, name, alpha=alpha)


def gelu(x: Tensor, approximate: bool = False, name: str | None = None) -> Tensor:
    """x * Phi(x) with the exact normal CDF (erf, elementwise in Python: slow on big tensors), or with
    `approximate=True` its tanh approximation (fast)."""
    return _activation(_n.GELU, x, name, approximate=bool(approximate))


def silu(x: Tensor, name: str | None = None) -> Tensor:
    return _activation(_n.SILU, x, name)


def softplus(x: Tensor, beta: float = 1, threshold: float = 20, name: str | None = None) -> Tensor:
    return _activation(_n.SOFTPLUS, x, name, beta=beta, threshold=threshold)


def hardswish(x: Tensor, name: str | None = None) -> Tensor:
    return _activation(_n.HARDSWISH, x, name)


# -- convolution, pooling, normalisation (NCHW only) -------------------------------------------------
def _nchw(api: str, x: Tensor, data_format: str) -> None:
    refuse_unsupported(api, data_format=data_format != "NCHW" and data_format)
    if x.ndim != 4:
        raise ValueError(f"{api}: x must be 4-D [N, C, H, W], got shape {x.shape}")


def conv2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: str | int | Sequence[Any] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    data_format: str = "NCHW",
    name: str | None = None,
) -> Tensor:
    """Paddle's `conv2d`: weight [out_channels, in_channels / groups, kh, kw]. Recorded as Paddle records it:
    the `conv2d` op (`depthwise_conv2d` when groups == in_channels > 1), then the bias reshaped to
    [1, C, 1, 1] and added by its own op."""
    _nchw("conv2d", x, data_format)
    if weight.ndim != 4:
        raise ValueError(f"conv2d: weight must be 4-D [out_channels, in_channels/groups, kh, kw], got {weight.shape}")
    channels, out_channels = x.shape[1], weight.shape[0]
    if not isinstance(groups, (int, np.integer)) or groups < 1 or out_channels % groups:
        raise ValueError(f"conv2d: groups must be a positive divisor of out_channels={out_channels}, got {groups!r}")
    if weight.shape[1] * groups != channels:
        raise ValueError(
            f"conv2d: weight {weight.shape} with groups={groups} takes {weight.shape[1] * groups} input channels, "
            f"x {x.shape} has {channels}"
        )
    kernel = (weight.shape[2], weight.shape[3])
    strides = _c.pair("conv2d", "stride", stride)
    paddings, dilations = _c.resolve_padding(
        "conv2d", padding, x.shape[2:], kernel, strides, _c.pair("conv2d", "dilation", dilation)
    )
    depthwise = groups == channels > 1 and out_channels % channels == 0
    attrs = {"strides": strides, "paddings": paddings, "dilations": dilations, "groups": int(groups)}
    out = apply(_c.DEPTHWISE_CONV2D if depthwise else _c.CONV2D, (x, weight), attrs)
    if bias is not None:
        out = add(out, reshape(bias, [1, -1, 1, 1]))
    return _named(out, name)


def _pool2d(api, x, kernel_size, stride, padding, ceil_mode, data_format, **attrs) -> Tensor:
    _nchw(api, x, data_format)
    kernel = _c.pair(api, "kernel_size", kernel_size)
    strides = kernel if stride is None else _c.pair(api, "stride", stride)
    paddings, _ = _c.resolve_padding(api, padding, x.shape[2:], kernel, strides, (1, 1))
    geometry = {"kernel_size": kernel, "strides": strides, "paddings": paddings, "ceil_mode": bool(ceil_mode)}
    return apply(_c.POOL2D, (x,), {**geometry, **attrs})


def max_pool2d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: str | int | Sequence[Any] = 0,
    return_mask: bool = False,
    ceil_mode: bool = False,
    data_format: str = "NCHW",
    name: str | None = None,
) -> Tensor:
    """The maximum of each window (stride defaults to the kernel size); padding never wins. Recorded as
    Paddle's `pool2d` op."""
    refuse_unsupported("max_pool2d", return_mask=return_mask)
    out = _pool2d(
        "max_pool2d", x, kernel_size, stride, padding, ceil_mode, data_format,
        pooling_type="max", exclusive=True, divisor_override=None,
    )  # fmt: skip
    return _named(out, name)


def avg_pool2d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: str | int | Sequence[Any] = 0,
    ceil_mode: bool = False,
    exclusive: bool = True,
    divisor_override: float | None = None,
    data_format: str = "NCHW",
    name: str | None = None,
) -> Tensor:
    """The mean of each window. `exclusive` (Paddle's default) divides by the input pixels the window covers,
    else by kh*kw (PyTorch's count_include_pad=True); `divisor_override` replaces either. Recorded as
    Paddle's `pool2d` op."""
    out = _pool2d(
        "avg_pool2d", x, kernel_size, stride, padding, ceil_mode, data_format,
        pooling_type="avg", exclusive=bool(exclusive), divisor_override=divisor_override,
    )  # fmt: skip
    return _named(out, name)


def batch_norm(
    x: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.9,
    epsilon: float = 1e-05,
    data_format: str = "NCHW",
    use_global_stats: bool | None = None,
    name: str | None = None,
) -> Tensor:
    """Normalise each channel (axis 1) of x, then scale by `weight` and shift by `bias`. The statistics are
    the batch's when training (and the running ones are updated in place, Paddle's momentum: running =
    momentum * running + (1 - momentum) * batch), the running ones otherwise; `use_global_stats` forces
    either way."""
    refuse_unsupported("batch_norm", data_format=data_format not in ("NC", "NCL", "NCHW", "NCDHW") and data_format)
    if x.ndim < 2:
        raise ValueError(f"batch_norm: x must have a channel axis (shape [N, C, ...]), got shape {x.shape}")
    for arg, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        if t is not None and t.shape != [x.shape[1]]:
            raise ValueError(f"batch_norm: {arg} must have shape [{x.shape[1]}] (x's channels), got {t.shape}")
    use_batch_stats = training if use_global_stats is None else not use_global_stats
    attrs = {"momentum": momentum, "epsilon": epsilon, "use_batch_stats": use_batch_stats}
    out = apply(_bn.BATCH_NORM, (x, running_mean, running_var, weight, bias), attrs)
    if use_batch_stats:  # the forward changed them in place
        running_mean._bump_version()
        running_var._bump_version()
    return _named(out, name)


def _reflected(op: Callable[[Any, Any], Tensor]) -> Callable[[Tensor, Any], Tensor]:
    def method(self: Tensor, other: Any) -> Tensor:
        return op(other, self)

    method.__name__ = method.__qualname__ = f"r{op.__name__}"
    return method


# Tensor's operators and op methods, each one of the functions above with the tensor as its first argument. The
# autograd package binds them onto Tensor: the ops are built on Tensor, so tensor.py cannot import them.
TENSOR_METHODS: dict[str, Callable[..., Any]] = {
    "__add__": add,
    "__radd__": _reflected(add),
    "__sub__": subtract,
    "__rsub__": _reflected(subtract),
    "__mul__": multiply,
    "__rmul__": _reflected(multiply),
    "__truediv__": divide,
    "__rtruediv__": _reflected(divide),
    "__matmul__": matmul,
    "__rmatmul__": _reflected(matmul),
    "__pow__": pow,
    "__rpow__": _reflected(pow),
    "__neg__": neg,
    "__getitem__": getitem,
    "__setitem__": setitem_,
    "astype": cast,
    **{
        method.__name__: method
        for method in (
            *(add_, subtract_, multiply_, divide_, pow_, scale_, clip_, fill_, zero_),
            *(exp_, log_, sqrt_, tanh_, sin_, cos_, exp, log, sqrt, tanh, sin, cos),
            *(sum, mean, max, reshape, transpose, matmul, scale, clip, clone),
        )
    },
}
