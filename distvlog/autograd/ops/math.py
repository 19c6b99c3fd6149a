"""Elementwise arithmetic, unary math and matmul. Backward returns gradients in the broadcast shape;
the engine sums them back to each input's shape and dtype."""

from __future__ import annotations

import numpy as np

from ..opdef import op


def mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Matrix product; np.dot for 2-D, which always uses BLAS (np.matmul does not for some shapes: an outer
    product at batch 1 is several times slower)."""
    return np.dot(a, b) if a.ndim == 2 and b.ndim == 2 else np.matmul(a, b)


def _t(a, transpose):
    """`a` with its last two axes swapped when asked; a 1-D operand is left alone (Paddle ignores
    transpose_x/transpose_y for a vector)."""
    return np.swapaxes(a, -1, -2) if transpose and a.ndim > 1 else a


def _matmul_fwd(x, y, transpose_x=False, transpose_y=False):
    return np.matmul(_t(x, transpose_x), _t(y, transpose_y))


def _matmul_bwd(g, x, y, needs_grad, transpose_x=False, transpose_y=False):
    if x.ndim == 1 and y.ndim == 1:
        return g * y, g * x
    vec_x, vec_y = x.ndim == 1, y.ndim == 1  # numpy's rules: a vector is a row on the left, a column on the right
    tx, ty = transpose_x and not vec_x, transpose_y and not vec_y  # a vector is never transposed
    x2, y2 = (x[None, :] if vec_x else x), (y[:, None] if vec_y else y)
    g2 = np.expand_dims(g, -1) if vec_y else g
    g2 = np.expand_dims(g2, -2) if vec_x else g2
    gx = gy = None
    if needs_grad[0]:
        gx = _t(mm(g2, np.swapaxes(_t(y2, ty), -1, -2)), tx)
        gx = gx[..., 0, :] if vec_x else gx
    if needs_grad[1]:
        gy = _t(mm(np.swapaxes(_t(x2, tx), -1, -2), g2), ty)
        gy = gy[..., :, 0] if vec_y else gy
    return gx, gy


def _pow_base_grad(g, x, y):
    """g * y * x**(y-1), zero where y is 0: x**0 is constant, but 0 * 0**-1 would be NaN at x = 0."""
    return g * np.where(y == 0, 0, y * np.power(x, y - 1))


def _elementwise_pow_bwd(g, x, y, out, needs_grad):
    """The exponent's gradient is x**y * log(x), taken as zero where x is 0 and y >= 0 (as PyTorch does:
    0**y is flat in y there, but 0 * log(0) is NaN). A negative base has no real log: NaN."""
    gx = _pow_base_grad(g, x, y) if needs_grad[0] else None
    gy = g * np.where((x == 0) & (y >= 0), 0, out * np.log(x)) if needs_grad[1] else None
    return gx, gy


def _scale(x, scale, bias, bias_after_scale):
    return x * scale + bias if bias_after_scale else (x + bias) * scale


def _scale_into(target, x, scale, bias, bias_after_scale):
    if bias_after_scale:
        np.add(np.multiply(x, scale, out=target), bias, out=target)
    else:
        np.multiply(np.add(x, bias, out=target), scale, out=target)


def _clip_bwd(g, x, min, max):
    """Paddle's clip_grad: the gradient passes where x lies strictly between the bounds."""
    inside = np.ones(x.shape, dtype=bool)
    if min is not None:
        inside &= x > min
    if max is not None:
        inside &= x < max
    return (g * inside,)


ADD = op("add", "x y", np.add, lambda g: (g, g), promote=True)
SUBTRACT = op("subtract", "x y", np.subtract, lambda g: (g, -g), promote=True)
MULTIPLY = op("multiply", "x y", np.multiply, lambda g, x, y: (g * y, g * x), saves="x y", promote=True)
DIVIDE = op("divide", "x y", np.divide, lambda g, x, y: (g / y, -g * x / (y * y)), saves="x y", promote=True)
MATMUL = op("matmul", "x y", _matmul_fwd, _matmul_bwd, saves="x y needs_grad", promote=True)
NEG = op("neg", "x", np.negative, lambda g: (-g,))
POW = op("pow", "x", lambda x, y: np.power(x, y), lambda g, x, y: (_pow_base_grad(g, x, y),), saves="x")
ELEMENTWISE_POW = op("elementwise_pow", "x y", np.power, _elementwise_pow_bwd, saves="x y out needs_grad", promote=True)
EXP = op("exp", "x", np.exp, lambda g, out: (g * out,), saves="out")
LOG = op("log", "x", np.log, lambda g, x: (g / x,), saves="x")
SIN = op("sin", "x", np.sin, lambda g, x: (g * np.cos(x),), saves="x")
COS = op("cos", "x", np.cos, lambda g, x: (-g * np.sin(x),), saves="x")
TANH = op("tanh", "x", np.tanh, lambda g, out: (g * (1 - out * out),), saves="out")
SQRT = op("sqrt", "x", np.sqrt, lambda g, out: (g * 0.5 / out,), saves="out")
SCALE = op("scale", "x", _scale, lambda g, scale, bias, bias_after_scale: (g * scale,), inplace=_scale_into)
CLIP = op(
    "clip",
    "x",
    lambda x, min, max: np.clip(x, min, max),
    _clip_bwd,
    saves="x",
    inplace=lambda target, x, min, max: np.clip(x, min, max, out=target),
)
FILL = op(
    "fill",
    "x",
    lambda x, value: np.full_like(x, value),
    lambda g, value: (np.zeros_like(g),),  # the new values do not depend on the old
    inplace=lambda target, x, value: target.fill(value),
)
ASSIGN = op("assign", "x", np.copy, lambda g: (g,))  # Tensor.clone
