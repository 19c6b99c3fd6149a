"""nn.Conv2D: Paddle's constructor, weight layout, initialisation and unique names; what it refuses."""

from __future__ import annotations

import math

import numpy as np
import pytest

import distvlog as dv
from distvlog import nn
from distvlog.nn import functional as F
from distvlog.nn import initializer as init


def test_weight_layout_and_names_are_paddles():
    """weight [out_channels, in_channels / groups, kh, kw], bias [out_channels], named conv2d_<n>.w_0 / .b_0
    (Paddle's camel-to-snake rule keeps `2d` together)."""
    layer = nn.Conv2D(4, 6, (3, 2), groups=2)
    assert layer.weight.shape == [6, 2, 3, 2] and layer.bias.shape == [6]
    assert layer.full_name().startswith("conv2d_")
    assert layer.weight.name == f"{layer.full_name()}.w_0" and layer.bias.name == f"{layer.full_name()}.b_0"
    assert [name for name, _ in layer.named_parameters()] == ["weight", "bias"]
    assert not layer.weight.stop_gradient and not layer.bias.stop_gradient


def test_default_initialisation_is_paddles_normal_over_all_input_channels():
    """weight ~ N(0, 2 / (kh * kw * in_channels)) — in_channels, not in_channels / groups, as in Paddle;
    bias zeros. 2304 draws put the sample std within 5% of 0.0589 (the grouped fan would give 0.47)."""
    dv.seed(0)
    layer = nn.Conv2D(64, 256, 3, groups=64)
    expected = math.sqrt(2 / (3 * 3 * 64))
    assert abs(layer.weight.numpy().std() / expected - 1) < 0.05
    assert abs(layer.weight.numpy().mean()) < 0.1 * expected
    assert not layer.bias.numpy().any()


def test_forward_is_functional_conv2d_with_the_layers_arguments():
    """Stride, padding and dilation reach F.conv2d; bias_attr initialises the bias."""
    layer = nn.Conv2D(3, 5, 3, stride=2, padding=[1, 0], dilation=(1, 2), bias_attr=init.Constant(0.5))
    x = dv.randn([2, 3, 9, 10])
    expected = F.conv2d(x, layer.weight, layer.bias, stride=2, padding=[1, 0], dilation=(1, 2))
    np.testing.assert_array_equal(layer(x).numpy(), expected.numpy())
    assert (layer.bias.numpy() == 0.5).all()


def test_attrs_take_initializers_and_bias_attr_false_drops_the_bias():
    """weight_attr fills the weight; bias_attr=False: no bias parameter, none added."""
    layer = nn.Conv2D(2, 3, 1, weight_attr=init.Constant(2.0), bias_attr=False)
    assert layer.bias is None and (layer.weight.numpy() == 2).all()
    assert layer(dv.ones([1, 2, 2, 2])).numpy().tolist() == [[[[4.0, 4.0], [4.0, 4.0]]] * 3]


def test_a_training_step_changes_the_weight_and_the_bias():
    """Both parameters get gradients and an SGD step moves them."""
    layer = nn.Conv2D(2, 3, 3, padding=1)
    opt = dv.optim.SGD(learning_rate=0.1, parameters=layer.parameters())
    before = [p.numpy().copy() for p in layer.parameters()]
    layer(dv.randn([2, 2, 4, 4])).mean().backward()
    opt.step()
    assert all(not np.array_equal(b, p.numpy()) for b, p in zip(before, layer.parameters()))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"padding_mode": "reflect"}, NotImplementedError, "Conv2D: padding_mode='reflect' is not supported"),
        ({"data_format": "NHWC"}, NotImplementedError, "Conv2D: data_format='NHWC' is not supported"),
        ({"weight_attr": "conv.w"}, NotImplementedError, "Conv2D: weight_attr='conv.w' is not supported"),
        ({"groups": 4}, ValueError, "groups must divide in_channels=6 and out_channels=4"),
        ({"kernel_size": [3, 3, 3]}, ValueError, "kernel_size must be a positive int or two of them"),
    ],
)
def test_what_is_not_supported_or_wrong_raises_naming_the_argument(kwargs, error, message):
    """Unimplemented options raise NotImplementedError, wrong values ValueError, naming the argument."""
    args = {"in_channels": 6, "out_channels": 4, "kernel_size": 3, **kwargs}
    with pytest.raises(error, match=message):
        nn.Conv2D(**args)
