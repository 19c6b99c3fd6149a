"""The layers an MLP is built from (Paddle's names and weight layout), and their parameter arguments."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from ..autograd import flatten
from ..autograd.tensor import Tensor
from ..errors import refuse_unsupported
from . import functional as F
from .initializer import Initializer
from .layer import Layer, Parameter


def check_param_attrs(api: str, weight_attr: Any, bias_attr: Any) -> None:
    """`weight_attr` / `bias_attr` take an initializer or None, and `bias_attr` also a bool (False: no bias);
    anything else (Paddle's ParamAttr) raises rather than being ignored."""
    for arg, attr in (("weight_attr", weight_attr), ("bias_attr", bias_attr)):
        if not (attr is None or callable(attr) or (arg == "bias_attr" and isinstance(attr, bool))):
            raise NotImplementedError(
                f"{api}: {arg}={attr!r} is not supported (pass an initializer from distvlog.nn.initializer, or None)"
            )


def create_bias(layer: Layer, shape: list[int], bias_attr: Initializer | bool | None) -> Parameter | None:
    """The layer's bias (zeros unless `bias_attr` is an initializer), or None for `bias_attr=False`."""
    if bias_attr is False:
        return None
    return layer.create_parameter(shape, None if bias_attr is True else bias_attr, is_bias=True)


class Linear(Layer):
    """y = x @ weight + bias with weight of shape [in_features, out_features], as in Paddle (PyTorch stores
    the transpose). `weight_attr` / `bias_attr`: see `check_param_attrs`."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        weight_attr: Initializer | None = None,
        bias_attr: Initializer | bool | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        check_param_attrs("Linear", weight_attr, bias_attr)
        self.in_features, self.out_features = in_features, out_features
        self.weight = self.create_parameter([in_features, out_features], weight_attr)
        self.bias = create_bias(self, [out_features], bias_attr)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, dtype={self._dtype}"


class Sequential(Layer):
    """Runs its layers in order; `Sequential(a, b)` names them "0", "1", `Sequential(("fc", a), ...)` or an
    OrderedDict uses the given names."""

    def __init__(self, *layers: Any) -> None:
        super().__init__()
        if len(layers) == 1 and isinstance(layers[0], OrderedDict):
            layers = tuple(layers[0].items())
        for i, item in enumerate(layers):
            name, layer = item if isinstance(item, tuple) else (str(i), item)
            if not isinstance(layer, Layer):
                raise TypeError(f"Sequential: item {i} is a {type(layer).__name__}, not a Layer")
            setattr(self, name, layer)

    def forward(self, x: Any) -> Any:
        for layer in self._sub_layers.values():
            x = layer(x)
        return x

    def __getitem__(self, index: int) -> Layer:
        return list(self._sub_layers.values())[index]

    def __len__(self) -> int:
        return len(self._sub_layers)

    def __iter__(self) -> Iterator[Layer]:
        return iter(self._sub_layers.values())


class Flatten(Layer):
    """Merges axes start_axis..stop_axis (inclusive) into one: [N, C, H, W] -> [N, C*H*W] by default."""

    def __init__(self, start_axis: int = 1, stop_axis: int = -1) -> None:
        super().__init__()
        self.start_axis, self.stop_axis = start_axis, stop_axis

    def forward(self, x: Tensor) -> Tensor:
        return flatten(x, self.start_axis, self.stop_axis)

    def extra_repr(self) -> str:
        return f"start_axis={self.start_axis}, stop_axis={self.stop_axis}"


class Dropout(Layer):
    """Zeroes each element with probability `p` while training and scales the rest by 1 / (1 - p)
    (Paddle's upscale_in_train); the identity in eval mode. Paddle's arguments in Paddle's order: `axis`
    (dropping whole slices) and mode="downscale_in_infer" are not implemented and raise."""

    def __init__(
        self,
        p: float = 0.5,
        axis: int | list[int] | None = None,
        mode: str = "upscale_in_train",
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        if not 0 <= p < 1:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        refuse_unsupported("Dropout", axis=axis, mode=mode != "upscale_in_train" and mode)
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, training=self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
