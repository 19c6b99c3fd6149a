"""nn.functional.max_pool2d / avg_pool2d: values against Paddle's definition written as loops (window
clipped to the input, exclusive counts, ceil_mode sizes), gradients by finite differences, ties, errors."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradients

import distvlog as dv
from distvlog.nn import functional as F


def reference_pool2d(x, kernel, stride, pads, ceil_mode, mode, exclusive=True, divisor=None):
    """Paddle's CPU pooling: output size (H + top + bottom - k [+ stride - 1 under ceil_mode]) // stride + 1;
    window rows y*stride - top .. +k, clipped to the input; the mean divides by the pixels in the clipped
    window (exclusive) or by kh*kw."""
    n, c, h, w = x.shape
    extra = [s - 1 if ceil_mode else 0 for s in stride]
    oh = (h + pads[0] + pads[1] - kernel[0] + extra[0]) // stride[0] + 1
    ow = (w + pads[2] + pads[3] - kernel[1] + extra[1]) // stride[1] + 1
    out = np.zeros((n, c, oh, ow))
    for y in range(oh):
        for xx in range(ow):
            h0, w0 = y * stride[0] - pads[0], xx * stride[1] - pads[2]
            h1, w1 = min(h0 + kernel[0], h), min(w0 + kernel[1], w)
            h0, w0 = max(h0, 0), max(w0, 0)
            window = x[:, :, h0:h1, w0:w1]
            if mode == "max":
                out[:, :, y, xx] = window.max(axis=(2, 3))
            else:
                count = divisor or ((h1 - h0) * (w1 - w0) if exclusive else kernel[0] * kernel[1])
                out[:, :, y, xx] = window.sum(axis=(2, 3)) / count
    return out


# (x shape, kernel, stride, padding argument, the (top, bottom, left, right) it means, ceil_mode)
# fmt: off
CASES = {
    "2x2 stride 2 (LeNet)": ((2, 3, 8, 6), 2, None, 0, (0, 0, 0, 0), False),
    "3x3 stride 2 padding 1, odd": ((2, 2, 7, 9), 3, 2, 1, (1, 1, 1, 1), False),
    "3x3 stride 1 padding 1": ((1, 2, 5, 4), 3, 1, 1, (1, 1, 1, 1), False),
    "ceil_mode, odd sizes": ((1, 2, 5, 7), 2, 2, 0, (0, 0, 0, 0), True),
    "ceil_mode with padding": ((1, 2, 6, 5), 3, 2, 1, (1, 1, 1, 1), True),
    "kernel (3, 2) stride (2, 1)": ((1, 2, 7, 5), (3, 2), (2, 1), 0, (0, 0, 0, 0), False),
    "padding top, bottom, left, right": ((1, 1, 6, 6), 3, 2, [1, 0, 0, 2], (1, 0, 0, 2), False),
    "SAME": ((1, 1, 7, 6), 3, 2, "SAME", (1, 1, 0, 1), False),
}
# fmt: on


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _args(case):
    """x's shape, the pooling arguments, and the reference's (kernel, stride, pads, ceil_mode)."""
    shape, kernel, stride, padding, pads, ceil_mode = CASES[case]
    kwargs = {"kernel_size": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil_mode}
    return shape, kwargs, (_pair(kernel), _pair(kernel if stride is None else stride), pads, ceil_mode)


@pytest.mark.parametrize("case", CASES)
def test_max_pool2d_equals_paddles_definition(case):
    """Window maxima over the input only (padding never wins), Paddle's output size."""
    shape, kwargs, ref = _args(case)
    x = np.random.default_rng(0).standard_normal(shape)
    out = F.max_pool2d(dv.to_tensor(x), **kwargs)
    np.testing.assert_array_equal(out.numpy(), reference_pool2d(x, *ref, "max"))


@pytest.mark.parametrize("exclusive", [True, False])
@pytest.mark.parametrize("case", CASES)
def test_avg_pool2d_equals_paddles_definition(case, exclusive):
    """Window means, dividing by the input pixels covered (exclusive) or by kh*kw."""
    shape, kwargs, ref = _args(case)
    x = np.random.default_rng(0).standard_normal(shape)
    out = F.avg_pool2d(dv.to_tensor(x), exclusive=exclusive, **kwargs)
    np.testing.assert_allclose(out.numpy(), reference_pool2d(x, *ref, "avg", exclusive), rtol=1e-12)


@pytest.mark.parametrize("case", CASES)
def test_pool2d_gradients_match_finite_differences(case):
    """Max (distinct values, so no tie sits within eps) and average, exclusive and not, and divisor_override."""
    shape, kwargs, _ = _args(case)
    x = np.random.default_rng(2).permutation(np.prod(shape)).reshape(shape) / 7.0
    check_gradients(lambda t: F.max_pool2d(t, **kwargs), x)
    check_gradients(lambda t: F.avg_pool2d(t, **kwargs), x)
    check_gradients(lambda t: F.avg_pool2d(t, exclusive=False, **kwargs), x)
    check_gradients(lambda t: F.avg_pool2d(t, divisor_override=5, **kwargs), x)


def test_exclusive_leaves_padding_out_of_the_count():
    """A 2x2 window over a corner covers one input pixel: exclusive divides by 1, else by 4."""
    x = dv.ones([1, 1, 2, 2], dtype="float64")
    assert F.avg_pool2d(x, 2, 1, padding=1).numpy()[0, 0].tolist() == [[1, 1, 1], [1, 1, 1], [1, 1, 1]]
    inclusive = F.avg_pool2d(x, 2, 1, padding=1, exclusive=False).numpy()[0, 0]
    assert inclusive.tolist() == [[0.25, 0.5, 0.25], [0.5, 1, 0.5], [0.25, 0.5, 0.25]]
    assert F.avg_pool2d(x, 2, 1, padding=1, divisor_override=2).numpy()[0, 0, 1, 1] == 2


def test_ceil_mode_adds_the_partial_last_window():
    """5 rows, kernel 2, stride 2: 2 windows, 3 with ceil_mode (the last reads one row)."""
    x = dv.to_tensor(np.arange(25.0).reshape(1, 1, 5, 5))
    assert F.max_pool2d(x, 2).shape == [1, 1, 2, 2]
    out = F.max_pool2d(x, 2, ceil_mode=True)
    assert out.numpy()[0, 0].tolist() == [[6, 8, 9], [16, 18, 19], [21, 23, 24]]
    assert F.avg_pool2d(x, 2, ceil_mode=True).numpy()[0, 0, 2].tolist() == [20.5, 22.5, 24]


def test_a_tied_maximum_sends_the_whole_gradient_to_the_first_in_the_window():
    """Zeros everywhere (a ReLU's output): each window's top-left pixel takes the gradient, once, as in Paddle."""
    x = dv.zeros([1, 1, 4, 4], dtype="float64")
    x.stop_gradient = False
    (F.max_pool2d(x, 2) * dv.to_tensor(np.array([[[[1.0, 2.0], [3.0, 4.0]]]]))).sum().backward()
    expected = np.zeros((4, 4))
    expected[0, 0], expected[0, 2], expected[2, 0], expected[2, 2] = 1, 2, 3, 4
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], expected)


def test_overlapping_windows_add_their_gradients():
    """Stride 1, kernel 2: the largest pixel is the maximum of four windows and gets all four gradients."""
    x = np.zeros((1, 1, 3, 3))
    x[0, 0, 1, 1] = 5
    t = dv.to_tensor(x, stop_gradient=False)
    F.max_pool2d(t, 2, 1).sum().backward()
    assert t.grad.numpy()[0, 0, 1, 1] == 4 and t.grad.numpy().sum() == 4


def test_max_and_avg_pooling_record_paddles_pool2d_node():
    """Both record Paddle's one `pool2d` op, its pooling type an attribute."""
    x = dv.randn([1, 2, 4, 4])
    x.stop_gradient = False
    assert F.max_pool2d(x, 2).grad_fn.op.name == "pool2d"
    node = F.avg_pool2d(x, 2).grad_fn
    assert node.name == f"pool2d{node.seq}GradNode" and node.attrs["pooling_type"] == "avg"


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda x: F.max_pool2d(x, 2, return_mask=True), NotImplementedError, "max_pool2d: return_mask=True"),
        (lambda x: F.max_pool2d(x, 2, data_format="NHWC"), NotImplementedError, "data_format='NHWC'"),
        (lambda x: F.avg_pool2d(x, 2, data_format="NHWC"), NotImplementedError, "avg_pool2d: data_format"),
        (lambda x: F.max_pool2d(x, 0), ValueError, "kernel_size must be a positive int"),
        (lambda x: F.avg_pool2d(x, 2, padding="FULL"), ValueError, "padding must be"),
        (lambda x: F.max_pool2d(x, 7), ValueError, "no output pixel"),
        (lambda x: F.max_pool2d(x[0], 2), ValueError, r"x must be 4-D \[N, C, H, W\], got shape \[2, 5, 5\]"),
    ],
)
def test_bad_arguments_raise_one_clear_error(call, error, message):
    """Each bad or unimplemented argument is named in one error."""
    with pytest.raises(error, match=message):
        call(dv.randn([1, 2, 5, 5]))
