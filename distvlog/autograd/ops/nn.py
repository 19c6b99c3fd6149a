"""Activations and fused losses for `distvlog.nn.functional`; losses are numerically stable."""

from __future__ import annotations

import numpy as np

from ..opdef import op
from .math import mm


def _log_softmax(x, axis):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _labels(label, n_classes):
    label = label.reshape(label.shape[:-1]) if label.ndim > 1 and label.shape[-1] == 1 else label
    if label.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: label must be an integer tensor, got {label.dtype}")
    return label


def _rows(a, classes):
    """Index of each label's element in `a` viewed as rows of classes (cheaper than take_along_axis)."""
    return np.arange(a.size // a.shape[-1]), classes.ravel()


def _ce_fwd(logits, label, ignore_index, reduction):
    logp = _log_softmax(logits, -1)
    label = _labels(label, logits.shape[-1])
    valid = label != ignore_index
    safe = np.where(valid, label, 0)
    if safe.size and (safe.min() < 0 or safe.max() >= logits.shape[-1]):
        raise ValueError(f"cross_entropy: labels must be in [0, {logits.shape[-1]}), got {safe.min()}..{safe.max()}")
    picked = logp.reshape(-1, logp.shape[-1])[_rows(logp, safe)].reshape(safe.shape)
    losses = np.where(valid, -picked, 0).astype(logits.dtype)
    count = max(int(valid.sum()), 1)
    out = losses if reduction == "none" else losses.sum() / count if reduction == "mean" else losses.sum()
    return np.asarray(out, dtype=logits.dtype), {"softmax": np.exp(logp), "safe": safe, "valid": valid}


def _ce_bwd(g, softmax, safe, valid, ignore_index, reduction):
    grad = softmax.copy()
    grad.reshape(-1, grad.shape[-1])[_rows(grad, safe)] -= 1  # a view of the fresh copy: d/dlogits = p - onehot
    scale = valid / max(int(valid.sum()), 1) if reduction == "mean" else valid.astype(grad.dtype)
    g = g[..., None] if reduction == "none" else g
    return grad * (scale[..., None] * g), None


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


RELU = op("relu", "x", lambda x: np.maximum(x, 0), lambda g, out: (g * (out > 0),), saves="out")
SIGMOID = op("sigmoid", "x", lambda x: 0.5 * (1 + np.tanh(0.5 * x)),  # tanh form: no overflow for large |x|
             lambda g, out: (g * out * (1 - out),), saves="out")
SOFTMAX = op("softmax", "x", lambda x, axis: np.exp(_log_softmax(x, axis)),
             lambda g, out, axis: (out * (g - np.sum(g * out, axis=axis, keepdims=True)),), saves="out")
LOG_SOFTMAX = op("log_softmax", "x", _log_softmax,
                 lambda g, out, axis: (g - np.exp(out) * np.sum(g, axis=axis, keepdims=True),), saves="out")
CROSS_ENTROPY = op("cross_entropy", "input label", _ce_fwd, _ce_bwd, saves="softmax safe valid",
                   aux="softmax safe valid", differentiable=(True, False))
MSE_LOSS = op("mse_loss", "input label", _mse_fwd, _mse_bwd, saves="diff", aux="diff", promote=True)
LINEAR = op("linear", "x weight bias", lambda x, w, b: np.matmul(x, w) + b, _linear_bwd,
            saves="x weight needs_grad")
DROPOUT = op("dropout", "x", _dropout_fwd, lambda g, mask, p: (g * mask,), saves="mask", aux="mask")
