"""nn.Flatten: Paddle's default axes (1 to -1) and its own."""

from __future__ import annotations

import distvlog as dv
from distvlog import nn


def test_flatten_keeps_the_batch_axis_by_default():
    """Paddle's defaults start_axis=1, stop_axis=-1."""
    assert nn.Flatten()(dv.randn([2, 3, 4, 5])).shape == [2, 60]


def test_flatten_takes_start_and_stop_axes():
    """Given axes are used and shown in the repr."""
    layer = nn.Flatten(0, 1)
    assert layer(dv.randn([2, 3, 4])).shape == [6, 4]
    assert repr(layer) == "Flatten(start_axis=0, stop_axis=1)"
