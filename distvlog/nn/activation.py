"""Activation layers: each calls its `nn.functional` form with the arguments given at construction (Paddle's
names and defaults)."""

from __future__ import annotations

from typing import Any

from ..autograd.tensor import Tensor
from . import functional as F
from .layer import Layer


class _Activation(Layer):
    """Applies `function(x, **self.attrs)`; a subclass names its function and passes its arguments up."""

    function: Any

    def __init__(self, name: str | None = None, **attrs: Any) -> None:
        super().__init__()
        self.attrs = attrs
        self.name = name

    def forward(self, x: Tensor) -> Tensor:
        return type(self).function(x, **self.attrs, name=self.name)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())


class ReLU(_Activation):
    function = F.relu


class ReLU6(_Activation):
    function = F.relu6


class Sigmoid(_Activation):
    function = F.sigmoid


class Tanh(_Activation):
    function = F.tanh


class Silu(_Activation):
    function = F.silu


class Hardswish(_Activation):
    function = F.hardswish


class LeakyReLU(_Activation):
    function = F.leaky_relu

    def __init__(self, negative_slope: float = 0.01, name: str | None = None) -> None:
        super().__init__(name, negative_slope=negative_slope)


class ELU(_Activation):
    function = F.elu

    def __init__(self, alpha: float = 1.0, name: str | None = None) -> None:
        super().__init__(name, alpha=alpha)


class GELU(_Activation):
    """Exact (erf) by default, as in Paddle; `approximate=True` for the faster tanh form."""

    function = F.gelu

    def __init__(self, approximate: bool = False, name: str | None = None) -> None:
        super().__init__(name, approximate=approximate)


class Softplus(_Activation):
    function = F.softplus

    def __init__(self, beta: float = 1, threshold: float = 20, name: str | None = None) -> None:
        super().__init__(name, beta=beta, threshold=threshold)


class Softmax(_Activation):
    function = F.softmax

    def __init__(self, axis: int = -1, name: str | None = None) -> None:
        super().__init__(name, axis=axis)


class LogSoftmax(_Activation):
    function = F.log_softmax

    def __init__(self, axis: int = -1, name: str | None = None) -> None:
        super().__init__(name, axis=axis)
