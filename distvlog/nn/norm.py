"""Batch normalisation layers (Paddle's constructors, names and momentum convention).

The running statistics `_mean` and `_variance` (Paddle's attribute names, and Paddle's unique names
`batch_norm2d_0.w_1` / `.w_2`) are tensors outside `parameters()`: the optimizer does not step them, and
`DataParallel` neither averages their (non-existent) gradients nor checks them for agreement across ranks —
each rank keeps statistics of its own data, as with Paddle's non-synchronised BatchNorm.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..autograd.tensor import Tensor
from ..errors import refuse_unsupported
from . import functional as F
from .initializer import Constant, Initializer
from .layer import Layer, Parameter, unique_name
from .layers import check_param_attrs


class _BatchNormBase(Layer):
    """y = (x - mean) / sqrt(variance + epsilon) * weight + bias per channel (axis 1), with the batch's
    statistics while training (updating the running ones: running = momentum * running + (1 - momentum) *
    batch) and the running ones in eval mode; `use_global_stats` forces one or the other. `weight_attr` /
    `bias_attr` take an initializer, None, or False for a frozen weight of ones / bias of zeros; `data_format`
    the class's layout (None: the default)."""

    _layouts: dict[int, str]  # accepted input rank -> its data format

    def __init__(
        self,
        num_features: int,
        momentum: float = 0.9,
        epsilon: float = 1e-05,
        weight_attr: Initializer | bool | None = None,
        bias_attr: Initializer | bool | None = None,
        data_format: str | None = None,
        use_global_stats: bool | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__()
        api = type(self).__name__
        refuse_unsupported(api, data_format=data_format not in (None, *self._layouts.values()) and data_format)
        check_param_attrs(api, None if weight_attr is False else weight_attr, bias_attr)
        self._num_features, self._momentum, self._epsilon = num_features, momentum, epsilon
        self._use_global_stats, self._name = use_global_stats, name
        self.weight = self._affine([num_features], weight_attr, Constant(1.0), is_bias=False)
        self.bias = self._affine([num_features], bias_attr, Constant(0.0), is_bias=True)
        self._mean = self._statistic(0.0)
        self._variance = self._statistic(1.0)

    def _affine(self, shape: list[int], attr: Any, default: Initializer, is_bias: bool) -> Parameter:
        """weight or bias: trainable, or with attr=False frozen at its default value (Paddle's convention)."""
        param = self.create_parameter(
            shape, None if isinstance(attr, bool) else attr, is_bias=is_bias, default_initializer=default
        )
        param.stop_gradient = attr is False
        return param

    def _statistic(self, value: float) -> Tensor:
        """A running statistic, named like the layer's next weight as in Paddle (where it is a frozen parameter)."""
        return Tensor(np.full(self._num_features, value, self._dtype), name=unique_name(f"{self.full_name()}.w"))

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self._layouts:
            shapes = " or ".join(f"[{', '.join(layout)}]" for layout in self._layouts.values())
            raise ValueError(f"{type(self).__name__}: expected input of shape {shapes}, got {x.shape}")
        return F.batch_norm(
            x,
            self._mean,
            self._variance,
            self.weight,
            self.bias,
            training=self.training,
            momentum=self._momentum,
            epsilon=self._epsilon,
            use_global_stats=self._use_global_stats,
            name=self._name,
        )

    def extra_repr(self) -> str:
        return f"num_features={self._num_features}, momentum={self._momentum}, epsilon={self._epsilon}"


class BatchNorm1D(_BatchNormBase):
    """Over [N, C] or [N, C, L] input."""

    _layouts = {2: "NC", 3: "NCL"}


class BatchNorm2D(_BatchNormBase):
    """Over [N, C, H, W] input."""

    _layouts = {4: "NCHW"}
