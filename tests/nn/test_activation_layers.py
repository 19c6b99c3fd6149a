"""The activation layers: each is its nn.functional form with the constructor's arguments (Paddle's names and
defaults)."""

from __future__ import annotations

import numpy as np
import pytest

import distvlog as dv
from distvlog import nn
from distvlog.nn import functional as F

LAYERS = [
    (nn.ReLU(), lambda x: F.relu(x)),
    (nn.ReLU6(), lambda x: F.relu6(x)),
    (nn.Sigmoid(), lambda x: F.sigmoid(x)),
    (nn.Tanh(), lambda x: F.tanh(x)),
    (nn.Silu(), lambda x: F.silu(x)),
    (nn.Hardswish(), lambda x: F.hardswish(x)),
    (nn.LeakyReLU(), lambda x: F.leaky_relu(x, 0.01)),
    (nn.LeakyReLU(0.3), lambda x: F.leaky_relu(x, 0.3)),
    (nn.ELU(0.5), lambda x: F.elu(x, 0.5)),
    (nn.GELU(), lambda x: F.gelu(x)),
    (nn.GELU(approximate=True), lambda x: F.gelu(x, True)),
    (nn.Softplus(2, 10), lambda x: F.softplus(x, 2, 10)),
    (nn.Softmax(axis=0), lambda x: F.softmax(x, 0)),
    (nn.LogSoftmax(), lambda x: F.log_softmax(x, -1)),
]


@pytest.mark.parametrize(("layer", "function"), LAYERS, ids=lambda v: repr(v) if isinstance(v, nn.Layer) else "")
def test_each_layer_is_its_functional_form(layer, function):
    """Same values as the functional call with the same arguments; no parameters."""
    x = dv.to_tensor(np.linspace(-8, 8, 12).reshape(3, 4))
    np.testing.assert_array_equal(layer(x).numpy(), function(x).numpy())
    assert layer.parameters() == []


def test_defaults_and_arguments_show_in_the_repr():
    """The repr lists the constructor's arguments, defaults included."""
    assert repr(nn.LeakyReLU()) == "LeakyReLU(negative_slope=0.01)"
    assert repr(nn.Softplus()) == "Softplus(beta=1, threshold=20)"
    assert repr(nn.Sigmoid()) == "Sigmoid()"


def test_the_output_takes_the_layers_name():
    """`name=` names the output tensor."""
    assert nn.GELU(name="act")(dv.randn([2])).name == "act"
