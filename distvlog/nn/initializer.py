"""Parameter initializers (Paddle's `paddle.nn.initializer`), drawing from the generator `dv.seed` seeds, so
a seeded program builds the same model on every rank.

Fans follow Paddle: for a 2-D weight `[in, out]`, fan_in = in and fan_out = out; for more dimensions,
fan_in = shape[1] * receptive field and fan_out = shape[0] * receptive field.
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd.creation import generator
from ..autograd.tensor import Tensor


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for an activation (Paddle's `calculate_gain`)."""
    gains = {"sigmoid": 1.0, "linear": 1.0, "conv2d": 1.0, "tanh": 5.0 / 3, "relu": math.sqrt(2.0), "selu": 3.0 / 4}
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope * slope))
    if nonlinearity not in gains:
        raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}")
    return gains[nonlinearity]


class Initializer:
    """Fills a tensor in place when called on it."""

    def __call__(self, param: Tensor) -> None:
        param.set_value(self.sample(tuple(param.shape)))

    def sample(self, shape: tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError


class Constant(Initializer):
    def __init__(self, value: float = 0.0) -> None:
        self.value = value

    def sample(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.full(shape, self.value)


class Uniform(Initializer):
    def __init__(self, low: float = -1.0, high: float = 1.0) -> None:
        self.low, self.high = low, high

    def sample(self, shape: tuple[int, ...]) -> np.ndarray:
        return generator().uniform(self.low, self.high, shape)


class Normal(Initializer):
    def __init__(self, mean: float = 0.0, std: float = 1.0) -> None:
        self.mean, self.std = mean, std

    def sample(self, shape: tuple[int, ...]) -> np.ndarray:
        return generator().normal(self.mean, self.std, shape)


class XavierUniform(Initializer):
    """Glorot: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)); keeps activations' variance for tanh-like
    layers. Paddle's default for weights."""

    def __init__(self, fan_in: int | None = None, fan_out: int | None = None, gain: float = 1.0) -> None:
        self.fan_in, self.fan_out, self.gain = fan_in, fan_out, gain

    def sample(self, shape: tuple[int, ...]) -> np.ndarray:
        fan_in, fan_out = _fans(shape)
        fan_in, fan_out = self.fan_in or fan_in, self.fan_out or fan_out
        limit = self.gain * math.sqrt(6.0 / (fan_in + fan_out))
        return generator().uniform(-limit, limit, shape)


class KaimingUniform(Initializer):
    """He: U(-a, a) with a = gain * sqrt(3 / fan_in); keeps activations' variance through ReLU layers."""

    def __init__(self, fan_in: int | None = None, negative_slope: float = 0.0, nonlinearity: str = "relu") -> None:
        self.fan_in, self.negative_slope, self.nonlinearity = fan_in, negative_slope, nonlinearity

    def sample(self, shape: tuple[int, ...]) -> np.ndarray:
        fan_in = self.fan_in or _fans(shape)[0]
        limit = calculate_gain(self.nonlinearity, self.negative_slope) * math.sqrt(3.0 / fan_in)
        return generator().uniform(-limit, limit, shape)
