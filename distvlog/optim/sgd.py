"""Stochastic gradient descent, plain or with (Nesterov) momentum."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..autograd.tensor import Tensor
from .optimizer import Optimizer


class SGD(Optimizer):
    """param -= lr * v with v = momentum * v + grad (v = grad without momentum); with Nesterov,
    param -= lr * (grad + momentum * v). The same rule as PyTorch's SGD and Paddle's Momentum.

    Positional arguments are Paddle's SGD's; `momentum` and `use_nesterov`, which Paddle's SGD lacks, are
    keyword-only. `name` is accepted and unused, as in Paddle's eager mode."""

    def __init__(
        self,
        learning_rate: float = 0.001,
        parameters: Iterable[Tensor] | None = None,
        weight_decay: float | None = None,
        grad_clip: object = None,
        name: str | None = None,
        *,
        momentum: float = 0.0,
        use_nesterov: bool = False,
    ) -> None:
        super().__init__(learning_rate, parameters, weight_decay, grad_clip)
        if momentum < 0:
            raise ValueError(f"{type(self).__name__}: momentum must be >= 0, got {momentum}")
        if use_nesterov and not momentum:
            raise ValueError(f"{type(self).__name__}: use_nesterov needs momentum > 0")
        self._momentum, self._nesterov = momentum, use_nesterov

    def _update(self, param: Tensor, grad: np.ndarray, lr: float) -> None:
        if self._momentum:
            velocity = self._buffer(param, "velocity")
            velocity *= self._momentum
            velocity += grad
            grad = grad + self._momentum * velocity if self._nesterov else velocity
        param.subtract_(lr * grad)


class Momentum(SGD):
    """Paddle's `paddle.optimizer.Momentum` signature up to `grad_clip` (momentum first, 0.9 by default); its
    later arguments (multi_precision, rescale_grad, ...) are not accepted."""

    def __init__(
        self,
        learning_rate: float = 0.001,
        momentum: float = 0.9,
        parameters: Iterable[Tensor] | None = None,
        use_nesterov: bool = False,
        weight_decay: float | None = None,
        grad_clip: object = None,
    ) -> None:
        super().__init__(
            learning_rate, parameters, weight_decay, grad_clip, momentum=momentum, use_nesterov=use_nesterov
        )
