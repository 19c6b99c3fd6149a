"""The optimizer base: which parameters, the learning rate, L2 weight decay, per-parameter state.

Gradient arrays are values (the engine may share one array between tensors, or hand out a read-only
broadcast view), so an update never writes into `.grad`; it writes into the parameter's own array and the
optimizer's state, which nobody else holds.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..autograd.guards import no_grad
from ..autograd.tensor import Tensor


class Optimizer:
    """Subclasses define `_update(param, grad, lr)`, changing the parameter in place through its public
    in-place methods (`param.subtract_(...)`, under no_grad: the version goes up). Constructors take
    Paddle's arguments in Paddle's order; one this library does not implement raises unless it is left at
    its default (a silently ignored `grad_clip` would train a different model)."""

    def __init__(
        self,
        learning_rate: float,
        parameters: Iterable[Tensor] | None,
        weight_decay: float | None = None,
        grad_clip: object = None,
    ) -> None:
        if grad_clip is not None:
            raise NotImplementedError(
                f"{type(self).__name__}: grad_clip is not supported (clip the gradients before step())"
            )
        if parameters is None:
            raise ValueError(f"{type(self).__name__}: pass parameters=model.parameters() (eager mode needs them)")
        self._parameter_list = list(parameters)
        for i, p in enumerate(self._parameter_list):
            if not isinstance(p, Tensor):
                raise TypeError(f"{type(self).__name__}: parameter {i} is a {type(p).__name__}, not a Tensor")
        if weight_decay is not None and weight_decay < 0:
            raise ValueError(f"{type(self).__name__}: weight_decay must be >= 0, got {weight_decay}")
        self._learning_rate = float(learning_rate)
        self._weight_decay = float(weight_decay or 0.0)
        self._state: dict[Tensor, dict[str, np.ndarray]] = {}

    def get_lr(self) -> float:
        return self._learning_rate

    def set_lr(self, value: float) -> None:
        self._learning_rate = float(value)

    def step(self) -> None:
        """Update every parameter that has a gradient (L2 weight decay adds `weight_decay * param` to it)."""
        lr, decay = self._learning_rate, self._weight_decay
        with no_grad():  # an update is not part of any graph (Paddle's step runs under no_grad too)
            for param in self._parameter_list:
                if param.grad is None or param.stop_gradient:
                    continue
                grad = param.grad.numpy()
                if decay:
                    grad = grad + decay * param.numpy()
                self._update(param, grad, lr)

    def _update(self, param: Tensor, grad: np.ndarray, lr: float) -> None:
        raise NotImplementedError

    def _buffer(self, param: Tensor, name: str) -> np.ndarray:
        """The optimizer's own per-parameter array `name` (zeros at first), safe to update in place."""
        state = self._state.setdefault(param, {})
        buf = state.get(name)
        if buf is None:
            buf = state[name] = np.zeros_like(param.numpy())
        return buf

    def clear_grad(self, set_to_zero: bool = True) -> None:
        """Paddle's clear_grad: zero every gradient, or drop it (`set_to_zero=False`, cheaper: the next
        backward stores its gradient without adding)."""
        for param in self._parameter_list:
            param.clear_gradient(set_to_zero)

    zero_grad = clear_grad
