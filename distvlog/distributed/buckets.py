"""Gradient buckets: parameters packed into flat arrays so one allreduce moves many of them.

The layout is a pure function of the parameter list (reverse order, as backward produces the last
layer's gradients first; a new bucket when the size limit is reached or the dtype changes), so every
rank computes the same buckets without talking to the others.

A bucket's reduction buffer (`buffer()`) holds the gradients, then one use count per parameter: 1 where this
rank has a gradient for it. The same allreduce sums the counts, so every rank learns which parameters some
rank used without another collective, and a parameter no rank used keeps `.grad` None, as it would without
DataParallel (an optimizer then leaves it alone: no weight decay, no Adam moment).
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
        return flat[self.offsets[i] : self.offsets[i] + param.size].reshape(param.shape)

    def buffer(self) -> np.ndarray:
        """A zeroed reduction buffer: the gradients, then the use counts."""
        return np.zeros(self.size + len(self.params), self.dtype)

    def gradients(self, flat: np.ndarray) -> np.ndarray:
        """The gradient part of a reduction buffer (all of a plain gradient array)."""
        return flat[: self.size]

    def put(self, flat: np.ndarray, i: int, grad: np.ndarray) -> None:
        """Parameter i's gradient into `flat`; in a reduction buffer also counted as used."""
        self.slot(flat, i)[...] = grad
        if len(flat) > self.size:
            flat[self.size + i] = 1

    def pack(self, flat: np.ndarray | None = None) -> np.ndarray:
        """The parameters' current gradients in `flat` (by default a new plain array; zeros for a parameter
        without a gradient, which a reduction buffer does not count)."""
        flat = np.zeros(self.size, self.dtype) if flat is None else flat
        for i, param in enumerate(self.params):
            if param.grad is not None:
                self.put(flat, i, param.grad.numpy())
        return flat

    def unpack(self, flat: np.ndarray) -> None:
        """Make the reduced gradients the parameters' `.grad` (views, no copy); from a reduction buffer only
        for the parameters some rank counted: the others keep their `.grad` (None)."""
        counted = len(flat) > self.size
        for i, param in enumerate(self.params):
            if not counted or flat[self.size + i]:
                param.grad = Tensor(self.slot(flat, i))


def make_buckets(params: list[Tensor], bucket_bytes: int) -> list[Bucket]:
    """Buckets of at most `bucket_bytes` (a larger parameter gets one to itself), in reverse order."""
    buckets: list[Bucket] = []
    for param in reversed(params):
        dtype = np.dtype(param.dtype)
        current = buckets[-1] if buckets else None
        if (
            current is None
            or current.dtype != dtype
            or (current.size and current.nbytes + param.size * dtype.itemsize > bucket_bytes)
        ):
            current = Bucket(len(buckets), dtype)
            buckets.append(current)
        current.add(param)
    return buckets
