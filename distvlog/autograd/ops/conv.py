"""Sliding-window ops on NCHW arrays: 2-D convolution and max/average pooling, with Paddle's geometry.

Both read the padded input through one strided view, `windows`: element [n, c, i, j, y, x] is what kernel
offset (i, j) sees at output pixel (y, x). Convolution copies it once into columns (im2col) and multiplies by
the weight, one matmul per group; pooling folds the kh*kw offsets with np.maximum / np.add. Backward adds each
offset's share back through the same view of a zeroed input. The Python loops run over kernel offsets, never
over pixels.

Geometry: `paddings` is (top, bottom, left, right) once "SAME"/"VALID" and the short forms are resolved
(`resolve_padding`); a kernel of k taps with dilation d spans d*(k-1)+1 rows; there are
(H + top + bottom - span) // stride + 1 output rows, rounded up instead under pooling's ceil_mode, whose last
window may reach past the padding (what it reads there counts as padding).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..opdef import op

Pair = tuple[int, int]
Pads = tuple[int, int, int, int]


def pair(api: str, arg: str, value: int | Sequence[int]) -> Pair:
    """`3` or `[3, 3]` as (3, 3), Paddle's two ways to give a 2-D size; each at least 1."""
    values = (value, value) if isinstance(value, (int, np.integer)) else tuple(value)
    if len(values) != 2 or not all(isinstance(v, (int, np.integer)) and v >= 1 for v in values):
        raise ValueError(f"{api}: {arg} must be a positive int or two of them, got {value!r}")
    return int(values[0]), int(values[1])


def resolve_padding(
    api: str, padding: Any, in_hw: Sequence[int], kernel: Pair, strides: Pair, dilations: Pair
) -> tuple[Pads, Pair]:
    """Paddle's padding forms as (top, bottom, left, right), and the dilations to use with them: "VALID"
    (none), "SAME" (output size ceil(H / stride), the odd pixel at the bottom/right; as in Paddle, SAME sets
    the dilations to 1), an int, [pad_h, pad_w], [top, bottom, left, right], or one pair per NCHW dimension
    with [0, 0] for N and C."""
    if isinstance(padding, str):
        algorithm = padding.upper()
        if algorithm == "VALID":
            return (0, 0, 0, 0), dilations
        if algorithm != "SAME":
            raise ValueError(f"{api}: padding must be 'SAME', 'VALID' or sizes, got {padding!r}")
        pads = []
        for size, k, s in zip(in_hw, kernel, strides):
            total = max((-(-size // s) - 1) * s + k - size, 0)
            pads += [total // 2, total - total // 2]
        return (pads[0], pads[1], pads[2], pads[3]), (1, 1)
    if isinstance(padding, (int, np.integer)):
        flat = [padding] * 4
    else:
        items = list(padding) if isinstance(padding, (list, tuple)) else []
        if len(items) == 4 and all(isinstance(p, (list, tuple)) for p in items):
            if list(items[0]) != [0, 0] or list(items[1]) != [0, 0]:
                raise ValueError(f"{api}: padding of the batch and channel dimensions must be [0, 0], got {padding!r}")
            items = [p for pads in items[2:] for p in pads]
        if len(items) == 2:
            items = [items[0], items[0], items[1], items[1]]
        flat = items
    if len(flat) != 4 or not all(isinstance(p, (int, np.integer)) and p >= 0 for p in flat):
        raise ValueError(
            f"{api}: padding must be 'SAME', 'VALID', or non-negative sizes (an int, 2 or 4 ints, or 4 pairs), "
            f"got {padding!r}"
        )
    return (int(flat[0]), int(flat[1]), int(flat[2]), int(flat[3])), dilations


def _out_size(size: int, span: int, stride: int, ceil_mode: bool = False) -> int:
    return (size - span + (stride - 1 if ceil_mode else 0)) // stride + 1


def _pad(x: np.ndarray, paddings: Pads, value: float = 0.0) -> np.ndarray:
    top, bottom, left, right = paddings
    if not (top or bottom or left or right):
        return x
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


def _unpad(xp: np.ndarray, paddings: Pads, in_hw: Sequence[int]) -> np.ndarray:
    top, _, left, _ = paddings
    return xp[:, :, top : top + in_hw[0], left : left + in_hw[1]]


def _windows(xp: np.ndarray, kernel: Pair, strides: Pair, dilations: Pair, out_hw: Pair) -> np.ndarray:
    """[N, C, kh, kw, OH, OW]: a view of the padded input, element [.., i, j, y, x] = xp[.., y*sh + i*dh,
    x*sw + j*dw]. Writeable: for one offset (i, j) the pixels are distinct elements, so `+=` through
    `windows(..)[:, :, i, j]` is exact."""
    s = xp.strides
    shape = (*xp.shape[:2], *kernel, *out_hw)
    return as_strided(
        xp, shape, (s[0], s[1], s[2] * dilations[0], s[3] * dilations[1], s[2] * strides[0], s[3] * strides[1])
    )


def _geometry(in_hw, kernel, strides, paddings, dilations, ceil_mode=False) -> tuple[Pair, Pads]:
    """The output size and the paddings that make every window fit: under ceil_mode the last window may reach
    past the bottom/right padding, which is extended to cover it."""
    top, bottom, left, right = paddings
    spans = [d * (k - 1) + 1 for k, d in zip(kernel, dilations)]
    oh = _out_size(in_hw[0] + top + bottom, spans[0], strides[0], ceil_mode)
    ow = _out_size(in_hw[1] + left + right, spans[1], strides[1], ceil_mode)
    if oh < 1 or ow < 1:
        raise ValueError(
            f"input of {in_hw[0]}x{in_hw[1]} pixels padded by {list(paddings)} is smaller than the kernel's span "
            f"{spans[0]}x{spans[1]}: no output pixel"
        )
    bottom = max(bottom, (oh - 1) * strides[0] + spans[0] - in_hw[0] - top)
    right = max(right, (ow - 1) * strides[1] + spans[1] - in_hw[1] - left)
    return (oh, ow), (top, bottom, left, right)


def _fold(shares, in_shape, kernel, strides, paddings, dilations, out_hw, dtype) -> np.ndarray:
    """The input-shaped sum of `shares(i, j)`, each [N, C, OH, OW], added through kernel offset (i, j)'s view:
    how a window op's gradient goes back to its input (col2im). Windows that do not overlap (pooling's usual
    stride = kernel) are written, not added: one pass fewer over each share."""
    n, c, h, w = in_shape
    top, bottom, left, right = paddings
    grad = np.zeros((n, c, h + top + bottom, w + left + right), dtype)
    windows = _windows(grad, kernel, strides, dilations, out_hw)
    overlap = any(s < d * (k - 1) + 1 for k, s, d in zip(kernel, strides, dilations))
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            if overlap:
                windows[:, :, i, j] += shares(i, j)
            else:
                windows[:, :, i, j] = shares(i, j)
    return _unpad(grad, paddings, (h, w))


# -- convolution ------------------------------------------------------------------------------------
def _columns(x, kernel, strides, paddings, dilations, groups) -> tuple[np.ndarray, Pair]:
    """im2col: [N, groups, C/groups*kh*kw, OH*OW], one copy of the strided windows; and (OH, OW)."""
    out_hw, paddings = _geometry(x.shape[2:], kernel, strides, paddings, dilations)
    windows = _windows(_pad(x, paddings), kernel, strides, dilations, out_hw)
    n, c = x.shape[:2]
    return windows.reshape(n, groups, c // groups * kernel[0] * kernel[1], out_hw[0] * out_hw[1]), out_hw


def _conv_fwd(x, w, strides, paddings, dilations, groups):
    o = w.shape[0]
    cols, out_hw = _columns(x, w.shape[2:], strides, paddings, dilations, groups)
    out = np.matmul(w.reshape(groups, o // groups, -1), cols)  # [N, groups, O/groups, OH*OW]
    return out.reshape(x.shape[0], o, *out_hw)


def _conv_bwd(g, x, w, needs_grad, strides, paddings, dilations, groups):
    """grad_filter = g @ columns^T summed over the batch; grad_input = filter^T @ g folded back (col2im). The
    columns are rebuilt from the saved input: one copy, instead of keeping kh*kw copies of it alive."""
    n, (o, cg, kh, kw) = x.shape[0], w.shape
    g_rows = g.reshape(n, groups, o // groups, -1)
    grad_x = grad_w = None
    if needs_grad[1]:
        cols, _ = _columns(x, (kh, kw), strides, paddings, dilations, groups)
        grad_w = np.add.reduce(np.matmul(g_rows, cols.swapaxes(-1, -2)), axis=0).reshape(w.shape)
    if needs_grad[0]:
        out_hw, pads = _geometry(x.shape[2:], (kh, kw), strides, paddings, dilations)
        shares = np.matmul(w.reshape(groups, o // groups, -1).swapaxes(-1, -2), g_rows)
        shares = shares.reshape(n, groups * cg, kh, kw, *out_hw)
        grad_x = _fold(lambda i, j: shares[:, :, i, j], x.shape, (kh, kw), strides, pads, dilations, out_hw, g.dtype)
    return grad_x, grad_w


def _conv(name: str):
    return op(name, "input filter", _conv_fwd, _conv_bwd, saves="input filter needs_grad", promote=True)


CONV2D = _conv("conv2d")
DEPTHWISE_CONV2D = _conv("depthwise_conv2d")  # Paddle's op when groups == in_channels: its own node name


# -- pooling ----------------------------------------------------------------------------------------
_NO_DILATION = (1, 1)


def _pool_geometry(x_shape, kernel_size, strides, paddings, ceil_mode):
    return _geometry(x_shape[2:], kernel_size, strides, paddings, _NO_DILATION, ceil_mode)


def _divisor(in_hw, kernel_size, strides, paddings, out_hw, exclusive, divisor_override, dtype) -> np.ndarray | int:
    """What each window's sum is divided by: `divisor_override`; else, exclusive, the number of input pixels
    the window covers ([OH, OW], padding excluded); else kh*kw (Paddle's, also for windows past the padding)."""
    if divisor_override:
        return divisor_override
    if not exclusive:
        return kernel_size[0] * kernel_size[1]
    inside = _pad(np.ones((1, 1, *in_hw), dtype), paddings)
    windows = _windows(inside, kernel_size, strides, _NO_DILATION, out_hw)
    return np.maximum(windows.sum(axis=(2, 3))[0, 0], 1)  # (a window wholly past the edge reads nothing)


def _pool_fwd(x, kernel_size, strides, paddings, ceil_mode, pooling_type, exclusive, divisor_override):
    out_hw, pads = _pool_geometry(x.shape, kernel_size, strides, paddings, ceil_mode)
    is_max = pooling_type == "max"
    fill = -np.inf if is_max else 0.0
    windows = _windows(_pad(x, pads, fill), kernel_size, strides, _NO_DILATION, out_hw)
    fold = np.maximum if is_max else np.add
    out = windows[:, :, 0, 0].copy()
    for i in range(kernel_size[0]):
        for j in range(kernel_size[1]):
            if i or j:
                fold(out, windows[:, :, i, j], out=out)
    if not is_max:
        out /= _divisor(x.shape[2:], kernel_size, strides, pads, out_hw, exclusive, divisor_override, x.dtype)
    return out


def _pool_bwd(g, x, out, kernel_size, strides, paddings, ceil_mode, pooling_type, exclusive, divisor_override):
    """Average: each pixel of a window gets g / divisor. Max: the first pixel (row-major in the window) equal
    to the window's maximum takes all of g, as in Paddle, so ties (zeros after a ReLU) do not multiply it."""
    out_hw, pads = _pool_geometry(x.shape, kernel_size, strides, paddings, ceil_mode)
    args = (x.shape, kernel_size, strides, pads, _NO_DILATION, out_hw, g.dtype)
    if pooling_type != "max":
        share = g / _divisor(x.shape[2:], kernel_size, strides, pads, out_hw, exclusive, divisor_override, g.dtype)
        return (_fold(lambda i, j: share, *args),)
    windows = _windows(_pad(x, pads, -np.inf), kernel_size, strides, _NO_DILATION, out_hw)
    free = np.ones(out.shape, bool)  # windows whose maximum has not been found yet

    def first_max(i: int, j: int) -> np.ndarray:
        hit = windows[:, :, i, j] == out
        hit &= free
        np.logical_xor(free, hit, out=free)
        return g * hit

    return (_fold(first_max, *args),)


POOL2D = op("pool2d", "x", _pool_fwd, _pool_bwd, saves="x out")
