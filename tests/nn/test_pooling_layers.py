"""nn.MaxPool2D / nn.AvgPool2D: Paddle's constructors, forwarding to the functional forms; what they refuse."""

from __future__ import annotations

import numpy as np
import pytest

import distvlog as dv
from distvlog import nn
from distvlog.nn import functional as F


def test_max_pool_layer_is_the_functional_form_with_its_arguments():
    """Stride defaults to the kernel size; padding and ceil_mode are passed on."""
    x = dv.randn([2, 3, 7, 7])
    assert nn.MaxPool2D(2)(x).shape == [2, 3, 3, 3]
    layer = nn.MaxPool2D(3, 2, padding=1, ceil_mode=True)
    np.testing.assert_array_equal(layer(x).numpy(), F.max_pool2d(x, 3, 2, 1, ceil_mode=True).numpy())
    assert layer.full_name().startswith("max_pool2d_") and layer.parameters() == []


def test_avg_pool_layer_passes_exclusive_and_divisor_override():
    """exclusive and divisor_override reach the functional form."""
    x = dv.randn([1, 2, 5, 5])
    for kwargs in ({}, {"exclusive": False}, {"divisor_override": 3}):
        expected = F.avg_pool2d(x, 2, 1, padding=1, **kwargs)
        np.testing.assert_array_equal(nn.AvgPool2D(2, 1, padding=1, **kwargs)(x).numpy(), expected.numpy())


def test_the_output_takes_the_layers_name():
    """`name=` names the output tensor, as Paddle's layers do."""
    assert nn.MaxPool2D(2, name="pooled")(dv.randn([1, 1, 4, 4])).name == "pooled"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: nn.MaxPool2D(2, return_mask=True), "MaxPool2D: return_mask=True is not supported"),
        (lambda: nn.MaxPool2D(2, data_format="NHWC"), "MaxPool2D: data_format='NHWC' is not supported"),
        (lambda: nn.AvgPool2D(2, data_format="NHWC"), "AvgPool2D: data_format='NHWC' is not supported"),
    ],
)
def test_unsupported_arguments_are_refused_at_construction(make, message):
    """return_mask and NHWC raise when the layer is built, naming the argument."""
    with pytest.raises(NotImplementedError, match=message):
        make()
