"""Batch normalisation over axis 1 (channels) of an N, C, ... array, as Paddle's `batch_norm` op.

With batch statistics (training), the forward also updates the running statistics in place, as Paddle's
MeanOut/VarianceOut share the inputs' memory: running = momentum * running + (1 - momentum) * batch, with
the batch's biased variance (Paddle's convention; PyTorch keeps the unbiased one and weighs the other way).
The running statistics keep their own dtype; the normalisation runs in x's.
"""

from __future__ import annotations

import numpy as np

from ..opdef import op


def _per_channel(a: np.ndarray, ndim: int) -> np.ndarray:
    """A [C] vector shaped to broadcast along axis 1 of an ndim-array."""
    return a.reshape((1, -1) + (1,) * (ndim - 2))


def _reduce_axes(ndim: int) -> tuple[int, ...]:
    return (0, *range(2, ndim))


def _bn_fwd(x, mean, variance, scale, bias, momentum, epsilon, use_batch_stats):
    axes, dtype = _reduce_axes(x.ndim), x.dtype
    if use_batch_stats:
        mu = x.mean(axis=axes)
        centred = x - _per_channel(mu, x.ndim)
        var = np.mean(centred * centred, axis=axes)
        mean *= momentum
        mean += ((1 - momentum) * mu).astype(mean.dtype, copy=False)
        variance *= momentum
        variance += ((1 - momentum) * var).astype(variance.dtype, copy=False)
    else:
        var = variance.astype(dtype, copy=False)
        centred = x - _per_channel(mean.astype(dtype, copy=False), x.ndim)
    inv_std = (1 / np.sqrt(var + epsilon)).astype(dtype, copy=False)
    x_hat = centred * _per_channel(inv_std, x.ndim)
    out = x_hat if scale is None else x_hat * _per_channel(scale, x.ndim)
    if bias is not None:
        out = out + _per_channel(bias, x.ndim)
    return out, {"x_hat": x_hat, "inv_std": inv_std}


def _bn_bwd(g, x_hat, inv_std, scale, needs_grad, momentum, epsilon, use_batch_stats):
    """With batch statistics the mean and variance depend on x, which takes from grad_x, per channel, its mean
    and its projection on x_hat; with running statistics x is only shifted and scaled."""
    axes, ndim = _reduce_axes(g.ndim), g.ndim
    grad_x = grad_scale = grad_bias = None
    if needs_grad[0]:
        g_hat = g if scale is None else g * _per_channel(scale, ndim)
        if use_batch_stats:
            projection = _per_channel(np.mean(g_hat * x_hat, axis=axes), ndim)
            g_hat = g_hat - _per_channel(g_hat.mean(axis=axes), ndim) - x_hat * projection
        grad_x = g_hat * _per_channel(inv_std, ndim)
    if needs_grad[3]:
        grad_scale = np.sum(g * x_hat, axis=axes)
    if needs_grad[4]:
        grad_bias = np.sum(g, axis=axes)
    return grad_x, None, None, grad_scale, grad_bias


BATCH_NORM = op(
    "batch_norm",
    "x mean variance scale bias",
    _bn_fwd,
    _bn_bwd,
    saves="x_hat inv_std scale needs_grad",
    aux="x_hat inv_std",
    differentiable=(True, False, False, True, True),
)
