"""Activations and fused losses for `distvlog.nn.functional`; losses are numerically stable."""

from __future__ import annotations

import math

import numpy as np

from ..opdef import op
from .math import mm


def _log_softmax(x, axis):
    """x - logsumexp(x), shifted by the max so exp cannot overflow (ufunc reductions: numpy's np.max and
    np.sum wrappers cost more than the math at small sizes)."""
    shifted = x - np.maximum.reduce(x, axis=axis, keepdims=True)
    return shifted - np.log(np.add.reduce(np.exp(shifted), axis=axis, keepdims=True))


def _labels(label: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """Integer class labels shaped like the logits without their class axis ([N] or [N, 1] for [N, C])."""
    label = np.asarray(label)
    squeezed = label.reshape(label.shape[:-1]) if label.ndim > 1 and label.shape[-1] == 1 else label
    if label.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: label must be an integer tensor, got {label.dtype}")
    if squeezed.shape != logits.shape[:-1]:
        raise ValueError(
            f"cross_entropy: label shape {list(label.shape)} does not match input shape "
            f"{list(logits.shape)} (expected {list(logits.shape[:-1])} or {list(logits.shape[:-1]) + [1]})"
        )
    return squeezed


def _rows(a, classes):
    """Index of each label's element in `a` viewed as rows of classes (cheaper than take_along_axis)."""
    return np.arange(a.size // a.shape[-1]), classes.ravel()


def _ce_fwd(logits, label, ignore_index, reduction):
    n_classes = logits.shape[-1]
    label = _labels(label, logits)
    logp = _log_softmax(logits, -1)
    valid = label != ignore_index
    safe = np.where(valid, label, 0)
    if safe.size and (np.minimum.reduce(safe, axis=None) < 0 or np.maximum.reduce(safe, axis=None) >= n_classes):
        raise ValueError(f"cross_entropy: labels must be in [0, {n_classes}), got {safe.min()}..{safe.max()}")
    losses = -logp.reshape(-1, n_classes)[_rows(logp, safe)].reshape(safe.shape)
    count = np.count_nonzero(valid)
    if count < valid.size:
        losses = np.where(valid, losses, 0)  # ignored rows count zero
    if reduction != "none":
        losses = np.add.reduce(losses, axis=None)
        if reduction == "mean":
            losses = losses / max(count, 1)
    return np.asarray(losses, dtype=logits.dtype), {"softmax": np.exp(logp), "safe": safe, "valid": valid}


def _ce_bwd(g, softmax, safe, valid, reduction, **_attrs):
    """(softmax - onehot(label)) times each row's weight in the loss."""
    grad = softmax.copy()
    grad.reshape(-1, grad.shape[-1])[_rows(grad, safe)] -= 1  # a view of the fresh copy
    if reduction == "mean":
        g = g / max(np.count_nonzero(valid), 1)
    grad *= (valid * g)[..., None]
    return grad, None


def _mse_fwd(x, y, reduction):
    diff = x - y
    sq = diff * diff
    out = sq if reduction == "none" else sq.mean() if reduction == "mean" else sq.sum()
    return out, {"diff": diff}


def _mse_bwd(g, diff, reduction):
    grad = 2 * diff * (g / diff.size if reduction == "mean" else g)
    return grad, -grad


def _linear_bwd(g, x, w, needs_grad):
    """Only the wanted gradients: the first layer's input gradient is a full matmul that data never needs."""
    need_x, need_w, need_b = needs_grad
    gx = np.matmul(g, w.T) if need_x else None
    gw = mm(x.reshape(-1, x.shape[-1]).T, g.reshape(-1, g.shape[-1])) if need_w else None
    return gx, gw, (g if need_b else None)


def _dropout_fwd(x, p):
    from ..creation import generator

    mask = (generator().random(x.shape) >= p).astype(x.dtype) / (1 - p)  # Paddle's upscale_in_train
    return x * mask, {"mask": mask}


def _sigmoid(x):
    return 0.5 * (1 + np.tanh(0.5 * x))  # tanh form: no overflow for large |x|


RELU = op("relu", "x", lambda x: np.maximum(x, 0), lambda g, out: (g * (out > 0),), saves="out")
SIGMOID = op("sigmoid", "x", _sigmoid, lambda g, out: (g * out * (1 - out),), saves="out")
SOFTMAX = op(
    "softmax",
    "x",
    lambda x, axis: np.exp(_log_softmax(x, axis)),
    lambda g, out, axis: (out * (g - np.sum(g * out, axis=axis, keepdims=True)),),
    saves="out",
)
LOG_SOFTMAX = op(
    "log_softmax",
    "x",
    _log_softmax,
    lambda g, out, axis: (g - np.exp(out) * np.sum(g, axis=axis, keepdims=True),),
    saves="out",
)
CROSS_ENTROPY = op(
    "cross_entropy",
    "input label",
    _ce_fwd,
    _ce_bwd,
    saves="softmax safe valid",
    aux="softmax safe valid",
    differentiable=(True, False),
)
MSE_LOSS = op("mse_loss", "input label", _mse_fwd, _mse_bwd, saves="diff", aux="diff", promote=True)
LINEAR = op(
    "linear",
    "x weight bias",
    lambda x, w, b: np.matmul(x, w) + b,
    _linear_bwd,
    saves="x weight needs_grad",
    promote=True,
)
DROPOUT = op("dropout", "x", _dropout_fwd, lambda g, mask, p: (g * mask,), saves="mask", aux="mask")


# -- more activations (Paddle's formulas and attribute names) -------------------------------------------
_erf = np.frompyfunc(math.erf, 1, 1)  # numpy has no erf; math's is exact (~0.1 µs an element)
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def _gelu_fwd(x, approximate):
    if approximate:
        return 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)).astype(x.dtype))


def _gelu_bwd(g, x, approximate):
    if approximate:
        t = np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3))
        return (g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)),)
    cdf = 0.5 * (1 + _erf(x / math.sqrt(2)).astype(x.dtype))
    return (g * (cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)),)


def _silu_bwd(g, x):
    s = _sigmoid(x)
    return (g * s * (1 + x * (1 - s)),)


def _softplus_fwd(x, beta, threshold):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (Paddle's linear tail)."""
    bx = beta * x
    return np.where(bx > threshold, x, np.logaddexp(0, bx) / beta)


RELU6 = op("relu6", "x", lambda x: np.clip(x, 0, 6), lambda g, out: (g * ((out > 0) & (out < 6)),), saves="out")
LEAKY_RELU = op(
    "leaky_relu",
    "x",
    lambda x, negative_slope: np.where(x > 0, x, negative_slope * x),
    lambda g, x, negative_slope: (np.where(x > 0, g, negative_slope * g),),
    saves="x",
)
ELU = op(
    "elu",
    "x",
    lambda x, alpha: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))),
    lambda g, x, out, alpha: (np.where(x > 0, g, g * (out + alpha)),),
    saves="x out",
)
GELU = op("gelu", "x", _gelu_fwd, _gelu_bwd, saves="x")
SILU = op("silu", "x", lambda x: x * _sigmoid(x), _silu_bwd, saves="x")
SOFTPLUS = op(
    "softplus",
    "x",
    _softplus_fwd,
    lambda g, x, beta, threshold: (np.where(beta * x > threshold, g, g * _sigmoid(beta * x)),),
    saves="x",
)
HARDSWISH = op(
    "hardswish",
    "x",
    lambda x: x * np.clip(x + 3, 0, 6) / 6,
    lambda g, x: (g * np.where(x < -3, 0, np.where(x > 3, 1, (2 * x + 3) / 6)),),
    saves="x",
)
