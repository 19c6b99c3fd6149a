"""Making tensors: from data, random (one seeded generator per process), constant."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .tensor import Tensor, leaf

DEFAULT_DTYPE = np.dtype("float32")
_generator = np.random.default_rng()


def seed(value: int) -> None:
    """Seed the generator behind randn/rand/uniform/normal/dropout and the nn initialisers."""
    global _generator
    _generator = np.random.default_rng(value)


def generator() -> np.random.Generator:
    return _generator


def _dtype(dtype: Any) -> np.dtype:
    try:
        return np.dtype(dtype if dtype is not None else DEFAULT_DTYPE)
    except TypeError:
        raise TypeError(f"unknown dtype {dtype!r}") from None


def _shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)


def to_tensor(data: Any, dtype: Any = None, place: Any = None, stop_gradient: bool = True) -> Tensor:
    """A tensor holding a copy of `data`; Python floats become float32 (Paddle's default dtype). Every
    tensor lives on the CPU, so `place` is accepted and ignored."""
    if isinstance(data, Tensor):
        data = data._data
    array = np.array(data, dtype=dtype)
    if dtype is None and array.dtype == np.float64 and not isinstance(data, np.ndarray):
        array = array.astype(DEFAULT_DTYPE)
    return leaf(array, stop_gradient, "to_tensor")


def randn(shape: int | Sequence[int], dtype: Any = "float32") -> Tensor:
    return leaf(_generator.standard_normal(_shape(shape)).astype(_dtype(dtype), copy=False), True, "randn")


def rand(shape: int | Sequence[int], dtype: Any = "float32") -> Tensor:
    return leaf(_generator.random(_shape(shape)).astype(_dtype(dtype), copy=False), True, "rand")


def uniform(shape: int | Sequence[int], dtype: Any = "float32", min: float = -1.0, max: float = 1.0) -> Tensor:
    return leaf(_generator.uniform(min, max, _shape(shape)).astype(_dtype(dtype), copy=False), True, "uniform")


def normal(mean: float = 0.0, std: float = 1.0, shape: int | Sequence[int] = (1,), dtype: Any = "float32") -> Tensor:
    return leaf(_generator.normal(mean, std, _shape(shape)).astype(_dtype(dtype), copy=False), True, "normal")


def full(shape: int | Sequence[int], fill_value: float, dtype: Any = None) -> Tensor:
    return leaf(np.full(_shape(shape), fill_value, dtype=_dtype(dtype)), True, "full")


def zeros(shape: int | Sequence[int], dtype: Any = None) -> Tensor:
    return leaf(np.zeros(_shape(shape), dtype=_dtype(dtype)), True, "zeros")


def ones(shape: int | Sequence[int], dtype: Any = None) -> Tensor:
    return leaf(np.ones(_shape(shape), dtype=_dtype(dtype)), True, "ones")


def zeros_like(x: Tensor, dtype: Any = None) -> Tensor:
    return zeros(x.shape, dtype if dtype is not None else x.dtype)


def ones_like(x: Tensor, dtype: Any = None) -> Tensor:
    return ones(x.shape, dtype if dtype is not None else x.dtype)
