"""`Conv2D`: Paddle's constructor, weight layout [out_channels, in_channels / groups, kh, kw] and
initialisation (normal, std sqrt(2 / (kh * kw * in_channels)); bias zeros)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..autograd.ops.conv import pair
from ..autograd.tensor import Tensor
from ..errors import refuse_unsupported
from . import functional as F
from .initializer import Initializer, Normal
from .layer import Layer
from .layers import check_param_attrs, create_bias


class Conv2D(Layer):
    """A 2-D convolution over NCHW input. `padding` takes Paddle's forms ("SAME", "VALID", an int, [pad_h,
    pad_w], [top, bottom, left, right]); `padding_mode` other than "zeros" and `data_format` other than "NCHW"
    are not implemented and raise."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: str | int | Sequence[Any] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        padding_mode: str = "zeros",
        weight_attr: Initializer | None = None,
        bias_attr: Initializer | bool | None = None,
        data_format: str = "NCHW",
    ) -> None:
        super().__init__()
        refuse_unsupported(
            "Conv2D",
            padding_mode=padding_mode != "zeros" and padding_mode,
            data_format=data_format != "NCHW" and data_format,
        )
        check_param_attrs("Conv2D", weight_attr, bias_attr)
        if not isinstance(groups, int) or groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(
                f"Conv2D: groups must divide in_channels={in_channels} and out_channels={out_channels}, got {groups!r}"
            )
        self._kernel_size = pair("Conv2D", "kernel_size", kernel_size)
        self._in_channels, self._out_channels, self._groups = in_channels, out_channels, groups
        self._stride, self._padding, self._dilation = stride, padding, dilation
        std = math.sqrt(2.0 / (math.prod(self._kernel_size) * in_channels))
        self.weight = self.create_parameter(
            [out_channels, in_channels // groups, *self._kernel_size], weight_attr, default_initializer=Normal(0.0, std)
        )
        self.bias = create_bias(self, [out_channels], bias_attr)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight, self.bias, self._stride, self._padding, self._dilation, self._groups)

    def extra_repr(self) -> str:
        text = f"{self._in_channels}, {self._out_channels}, kernel_size={list(self._kernel_size)}"
        for arg, value, default in (
            ("stride", self._stride, 1),
            ("padding", self._padding, 0),
            ("dilation", self._dilation, 1),
            ("groups", self._groups, 1),
        ):
            if value != default:
                text += f", {arg}={value}"
        return text + ", data_format=NCHW"
