"""Gradient buckets: parameters packed into flat arrays so one allreduce moves many of them.

The layout is a pure function of the parameter list (reverse order, as backward produces the last
layer's gradients first; a new bucket when the size limit is reached or the dtype changes), so every
rank computes the same buckets without talking to the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..autograd import Tensor


@dataclass
class Bucket:
    index: int
    dtype: np.dtype
    params: list[Tensor] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # start of each parameter in the flat array
    size: int = 0  # elements

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def add(self, param: Tensor) -> None:
        self.params.append(param)
        self.offsets.append(self.size)
        self.size += param.size

    def slot(self, flat: np.ndarray, i: int) -> np.ndarray:
        """The part of `flat` that belongs to parameter i, shaped like it."""
        param = self.params[i]
        return flat[self.offsets[i]:self.offsets[i] + param.size].reshape(param.shape)

    def pack(self) -> np.ndarray:
        """A new flat array of the parameters' current gradients (zeros for a parameter without one)."""
        flat = np.zeros(self.size, self.dtype)
        for i, param in enumerate(self.params):
            if param.grad is not None:
                self.slot(flat, i)[...] = param.grad.numpy()
        return flat

    def unpack(self, flat: np.ndarray) -> None:
        """Make the reduced flat array the parameters' gradients (views, no copy)."""
        for i, param in enumerate(self.params):
            param.grad = Tensor(self.slot(flat, i))


def make_buckets(params: list[Tensor], bucket_bytes: int) -> list[Bucket]:
    """Buckets of at most `bucket_bytes` (a larger parameter gets one to itself), in reverse order."""
    buckets: list[Bucket] = []
    for param in reversed(params):
        dtype = np.dtype(param.dtype)
        current = buckets[-1] if buckets else None
        if current is None or current.dtype != dtype or (
                current.size and current.nbytes + param.size * dtype.itemsize > bucket_bytes):
            current = Bucket(len(buckets), dtype)
            buckets.append(current)
        current.add(param)
    return buckets
