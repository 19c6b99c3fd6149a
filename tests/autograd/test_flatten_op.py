"""flatten: Paddle's axes arguments, its own node, gradients, errors."""

from __future__ import annotations

import numpy as np
import pytest

import distvlog as dv


@pytest.mark.parametrize(
    ("start", "stop", "shape"),
    [(0, -1, [120]), (1, -1, [2, 60]), (1, 2, [2, 12, 5]), (-2, -1, [2, 3, 20]), (2, 2, [2, 3, 4, 5])],
)
def test_flatten_merges_the_axes_from_start_to_stop(start, stop, shape):
    """Axes start..stop (negative from the end) become one, in C order."""
    x = np.arange(120.0).reshape(2, 3, 4, 5)
    out = dv.flatten(dv.to_tensor(x), start, stop)
    assert out.shape == shape
    np.testing.assert_array_equal(out.numpy(), x.reshape(shape))


def test_flatten_records_paddles_flatten_node_and_routes_the_gradient_back():
    """flatten<n>GradNode; the gradient comes back in x's shape."""
    x = dv.randn([2, 3, 4], dtype="float64")
    x.stop_gradient = False
    out = dv.flatten(x, 1)
    assert out.grad_fn.name == f"flatten{out.grad_fn.seq}GradNode"
    weights = np.arange(24.0).reshape(2, 12)
    (out * dv.to_tensor(weights)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), weights.reshape(2, 3, 4))


def test_a_0d_tensor_flattens_to_one_element():
    """As in Paddle, a 0-d tensor becomes shape [1]."""
    assert dv.flatten(dv.to_tensor(3.0)).shape == [1]


def test_axes_out_of_order_or_range_are_one_clear_error():
    """start after stop, or an axis past the last, names both axes and the shape."""
    with pytest.raises(ValueError, match=r"start_axis=2, stop_axis=1 for shape \[2, 3, 4\]"):
        dv.flatten(dv.randn([2, 3, 4]), 2, 1)
    with pytest.raises(ValueError, match="start_axis=0, stop_axis=3"):
        dv.flatten(dv.randn([2, 3, 4]), 0, 3)
