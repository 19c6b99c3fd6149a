"""nn.functional.conv2d: values against a direct (loop) convolution, gradients by finite differences, Paddle's
padding forms, node names and logs, errors."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradients

import distvlog as dv
from distvlog.nn import functional as F


def reference_conv2d(x, w, stride, pads, dilation, groups):
    """The definition, one output pixel at a time: out[n, o, y, x] = sum over the group's channels and the
    kernel of w * the input under it. pads = (top, bottom, left, right)."""
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), pads[:2], pads[2:]))
    oh = (h + pads[0] + pads[1] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pads[2] + pads[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // groups
    for oc in range(o):
        c0 = oc // per_group * cg
        for y in range(oh):
            for xx in range(ow):
                top, left = y * stride[0], xx * stride[1]
                patch = xp[
                    :,
                    c0 : c0 + cg,
                    top : top + dilation[0] * (kh - 1) + 1 : dilation[0],
                    left : left + dilation[1] * (kw - 1) + 1 : dilation[1],
                ]
                out[:, oc, y, xx] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return out


# (x shape, weight shape, conv2d arguments, the (top, bottom, left, right) padding they mean, dilation used)
# fmt: off
CASES = {
    "plain, odd sizes, 3x2 kernel": ((2, 3, 7, 6), (4, 3, 3, 2), {}, (0, 0, 0, 0), (1, 1)),
    "stride 2, padding 1": ((2, 3, 7, 8), (4, 3, 3, 3), {"stride": 2, "padding": 1}, (1, 1, 1, 1), (1, 1)),
    "stride (2, 1), padding [1, 0]":
        ((1, 2, 7, 5), (3, 2, 3, 3), {"stride": [2, 1], "padding": [1, 0]}, (1, 1, 0, 0), (1, 1)),
    "dilation 2, padding 2": ((2, 2, 9, 8), (3, 2, 3, 3), {"dilation": 2, "padding": 2}, (2, 2, 2, 2), (2, 2)),
    "groups 2": ((2, 4, 6, 5), (6, 2, 3, 3), {"groups": 2, "padding": 1}, (1, 1, 1, 1), (1, 1)),
    "depthwise, multiplier 2": ((2, 3, 6, 6), (6, 1, 3, 3), {"groups": 3}, (0, 0, 0, 0), (1, 1)),
    "padding top, bottom, left, right": ((1, 2, 5, 6), (2, 2, 3, 3), {"padding": [1, 0, 2, 1]}, (1, 0, 2, 1), (1, 1)),
    "padding as NCHW pairs":
        ((1, 2, 5, 6), (2, 2, 2, 3), {"padding": [[0, 0], [0, 0], [1, 1], [0, 2]]}, (1, 1, 0, 2), (1, 1)),
    # SAME: out = ceil(7/2) = 4 rows need (4-1)*2+3-7 = 2 rows of padding (1, 1); ceil(8/2) = 4 columns
    # need 1: (0, 1); and as in Paddle, SAME drops the dilation
    "SAME, stride 2":
        ((1, 2, 7, 8), (3, 2, 3, 3), {"stride": 2, "padding": "SAME", "dilation": 2}, (1, 1, 0, 1), (1, 1)),
    "VALID": ((1, 2, 5, 5), (2, 2, 3, 3), {"padding": "valid"}, (0, 0, 0, 0), (1, 1)),
}
# fmt: on


def _arrays(x_shape, w_shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(w_shape[0])


@pytest.mark.parametrize("case", CASES)
def test_conv2d_equals_the_direct_definition(case):
    """Forward values and output shape match a loop-by-loop convolution, bias added per output channel."""
    x_shape, w_shape, kwargs, pads, dilation = CASES[case]
    x, w, b = _arrays(x_shape, w_shape)
    out = F.conv2d(dv.to_tensor(x), dv.to_tensor(w), dv.to_tensor(b), **kwargs)
    stride = kwargs.get("stride", 1)
    stride = (stride, stride) if isinstance(stride, int) else tuple(stride)
    expected = reference_conv2d(x, w, stride, pads, dilation, kwargs.get("groups", 1)) + b[None, :, None, None]
    assert out.shape == list(expected.shape)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", CASES)
def test_conv2d_gradients_match_finite_differences(case):
    """Gradients for the input, the filter and the bias, float64 central differences."""
    x_shape, w_shape, kwargs, _, _ = CASES[case]
    x, w, b = _arrays(x_shape, w_shape, seed=1)
    check_gradients(lambda x, w, b: F.conv2d(x, w, b, **kwargs), x, w, b)


def test_float32_conv2d_matches_the_float64_result():
    """The float32 path (BLAS sgemm) agrees with float64 to float32 precision and stays float32."""
    x, w, b = _arrays((4, 3, 12, 12), (5, 3, 3, 3))
    out32 = F.conv2d(dv.to_tensor(x, dtype="float32"), dv.to_tensor(w, dtype="float32"), stride=2, padding=1)
    out64 = F.conv2d(dv.to_tensor(x), dv.to_tensor(w), stride=2, padding=1)
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32.numpy(), out64.numpy(), rtol=1e-4, atol=1e-5)


def test_nodes_are_named_as_paddle_records_them():
    """conv2d, then the bias reshaped and added by ops of their own; depthwise_conv2d when groups == channels."""
    x = dv.randn([1, 4, 5, 5])
    w, b, w_depthwise = dv.randn([4, 2, 3, 3]), dv.randn([4]), dv.randn([8, 1, 3, 3])
    for t in (w, b, w_depthwise):
        t.stop_gradient = False
    add_node = F.conv2d(x, w, b, groups=2).grad_fn
    conv_node, reshape_node = add_node.edges
    assert [add_node.op.name, conv_node.op.name, reshape_node.op.name] == ["add", "conv2d", "reshape"]
    assert conv_node.name == f"conv2d{conv_node.seq}GradNode"
    assert F.conv2d(x, w_depthwise, groups=4).grad_fn.op.name == "depthwise_conv2d"
    assert F.conv2d(x, w, groups=2, name="features").name == "features"


def test_only_the_wanted_gradients_are_computed():
    """An input with stop_gradient (the images) gets no gradient; the filter still does."""
    x, w = dv.randn([2, 3, 6, 6]), dv.randn([4, 3, 3, 3])
    w.stop_gradient = False
    F.conv2d(x, w).sum().backward()
    assert x.grad is None and w.grad.shape == [4, 3, 3, 3]


def test_a_conv_node_logs_paddles_lines_under_backward_vlog_guard(records):
    """Level 4: begin run, the grad API banners, the Input dump with the saved input and filter, the kernel
    signature with Paddle's attribute names, the Output dump naming `<filter>@Grad`, the pending nodes."""
    x, w = dv.randn([1, 2, 5, 5]), dv.randn([3, 2, 3, 3])
    w.stop_gradient = False
    with dv.backward_vlog_guard(4):
        y = F.conv2d(x, w, padding=1)
    node = y.grad_fn
    y.sum().backward()
    events = [r["event"] for r in records if r.get("node") == node.name]
    api = "conv2d_grad"
    assert events[0] == f"{node!r} begin run"
    assert api in events[1] and "Running_AD_API_GRAD" in events[1]
    assert "( input , [{" in events[2] and f"( filter , [{{\n        Name: {w.name}" in events[2]
    assert f"Running_C++_API: {api}{node.seq}" in events[3]
    assert events[4] == f"{api} API kernel key: [numpy, CPU, float32]"
    for attr in ("strides", "paddings", "dilations", "groups"):
        assert f'"{attr}"' in events[5]
    assert f"( grad_filter , [{{\n        Name: {w.name}@Grad" in events[7] and "grad_input" not in events[7]
    assert events[-1].startswith(f"{node!r} Found pending node: GradNodeAccumulation")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"data_format": "NHWC"}, NotImplementedError, "conv2d: data_format='NHWC' is not supported"),
        ({"groups": 3}, ValueError, "groups must be a positive divisor of out_channels=4"),
        ({"groups": 2}, ValueError, r"takes 6 input channels, x \[1, 3, 5, 5\] has 3"),
        ({"padding": "FULL"}, ValueError, "padding must be 'SAME', 'VALID' or sizes"),
        ({"padding": [1, 2, 3]}, ValueError, "padding must be"),
        ({"padding": -1}, ValueError, "non-negative"),
        ({"padding": [[1, 0], [0, 0], [1, 1], [1, 1]]}, ValueError, "batch and channel dimensions"),
        ({"stride": 0}, ValueError, "stride must be a positive int"),
        ({"dilation": 3}, ValueError, "no output pixel"),
    ],
)
def test_bad_arguments_raise_one_clear_error(kwargs, error, message):
    """Each bad argument is named, with the shapes involved."""
    with pytest.raises(error, match=message):
        F.conv2d(dv.randn([1, 3, 5, 5]), dv.randn([4, 3, 3, 3]), **kwargs)


def test_a_3d_input_is_refused_with_its_shape():
    """A tensor without its batch axis is refused, naming the shape."""
    with pytest.raises(ValueError, match=r"conv2d: x must be 4-D \[N, C, H, W\], got shape \[3, 5, 5\]"):
        F.conv2d(dv.randn([3, 5, 5]), dv.randn([4, 3, 3, 3]))
