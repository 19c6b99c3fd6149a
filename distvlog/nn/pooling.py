"""Pooling layers over NCHW input (Paddle's constructors): they hold their arguments and call
`nn.functional.max_pool2d` / `avg_pool2d`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..autograd.tensor import Tensor
from ..errors import refuse_unsupported
from . import functional as F
from .layer import Layer


class MaxPool2D(Layer):
    """The maximum of each kernel_size window, moving by `stride` (default: kernel_size). `return_mask` and
    data_format other than "NCHW" are not implemented and raise."""

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: str | int | Sequence[Any] = 0,
        return_mask: bool = False,
        ceil_mode: bool = False,
        data_format: str = "NCHW",
        name: str | None = None,
    ) -> None:
        super().__init__()
        refuse_unsupported("MaxPool2D", return_mask=return_mask, data_format=data_format != "NCHW" and data_format)
        self.ksize, self.stride, self.padding, self.ceil_mode, self.name = kernel_size, stride, padding, ceil_mode, name

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.ksize, self.stride, self.padding, ceil_mode=self.ceil_mode, name=self.name)

    def extra_repr(self) -> str:
        return f"kernel_size={self.ksize}, stride={self.stride}, padding={self.padding}"


class AvgPool2D(Layer):
    """The mean of each kernel_size window; `exclusive=True` (Paddle's default) leaves the padding out of the
    count. data_format other than "NCHW" is not implemented and raises."""

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: str | int | Sequence[Any] = 0,
        ceil_mode: bool = False,
        exclusive: bool = True,
        divisor_override: float | None = None,
        data_format: str = "NCHW",
        name: str | None = None,
    ) -> None:
        super().__init__()
        refuse_unsupported("AvgPool2D", data_format=data_format != "NCHW" and data_format)
        self.ksize, self.stride, self.padding, self.ceil_mode = kernel_size, stride, padding, ceil_mode
        self.exclusive, self.divisor, self.name = exclusive, divisor_override, name

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(
            x, self.ksize, self.stride, self.padding, self.ceil_mode, self.exclusive, self.divisor, name=self.name
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.ksize}, stride={self.stride}, padding={self.padding}"
