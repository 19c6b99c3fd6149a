"""The activations of nn.functional: values against their formulas (Paddle's), gradients by finite
differences, node names."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gradcheck import check_gradients

import distvlog as dv
from distvlog.nn import functional as F

_erf = np.vectorize(math.erf)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# name -> (call, reference formula); points sit away from the kinks (0, 6, -3, 3), where differences lie
ACTIVATIONS = {
    "relu6": (F.relu6, lambda x: np.minimum(np.maximum(x, 0), 6)),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "elu": (lambda x: F.elu(x, 0.7), lambda x: np.where(x > 0, x, 0.7 * (np.exp(x) - 1))),
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    "gelu approximate": (
        lambda x: F.gelu(x, approximate=True),
        lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    ),
    "silu": (F.silu, lambda x: x * _sigmoid(x)),
    "softplus": (
        lambda x: F.softplus(x, beta=2, threshold=7),
        lambda x: np.where(2 * x > 7, x, np.log1p(np.exp(2 * x)) / 2),
    ),
    "hardswish": (F.hardswish, lambda x: x * np.minimum(np.maximum(x + 3, 0), 6) / 6),
    "sigmoid": (F.sigmoid, _sigmoid),
}
POINTS = np.array([-7.3, -4.1, -2.9, -1.2, -0.4, 0.3, 1.1, 2.2, 3.6, 4.9, 6.8])


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_values_follow_the_formula(name):
    """Each activation equals its formula on points either side of its kinks."""
    call, formula = ACTIVATIONS[name]
    np.testing.assert_allclose(call(dv.to_tensor(POINTS)).numpy(), formula(POINTS), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_gradients_match_finite_differences(name):
    """Each activation's gradient, float64 central differences."""
    call, _ = ACTIVATIONS[name]
    check_gradients(call, POINTS.reshape(1, -1).repeat(2, axis=0) * np.array([[1.0], [0.9]]))


def test_exact_gelu_is_x_times_the_normal_cdf():
    """gelu(1) = Phi(1) = 0.8413447460685429 (to double precision, not the tanh approximation's 0.8411920)."""
    assert F.gelu(dv.to_tensor(np.array([1.0]))).item() == pytest.approx(0.8413447460685429, rel=1e-15)
    assert F.gelu(dv.to_tensor(np.array([1.0])), approximate=True).item() == pytest.approx(0.841192, rel=1e-6)
    assert F.gelu(dv.to_tensor(np.array([1.0], dtype=np.float32))).dtype == np.float32


def test_softplus_is_finite_far_out():
    """No overflow where exp(beta x) would (below the threshold when the threshold is large)."""
    out = F.softplus(dv.to_tensor(np.array([-800.0, 800.0])), threshold=1000).numpy()
    assert np.isfinite(out).all() and out[1] == 800


@pytest.mark.parametrize(("call", "op_name"), [(F.relu6, "relu6"), (F.gelu, "gelu"), (F.silu, "silu")])
def test_each_records_a_node_named_after_paddles_op(call, op_name):
    """The node takes Paddle's op name: relu61GradNode, gelu1GradNode, ..."""
    x = dv.randn([3])
    x.stop_gradient = False
    node = call(x).grad_fn
    assert node.name == f"{op_name}{node.seq}GradNode"
