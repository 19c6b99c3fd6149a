"""Adam with bias correction (Kingma & Ba), per-parameter step counts as in Paddle's beta-pow accumulators."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..autograd.tensor import Tensor
from ..errors import refuse_unsupported
from .optimizer import Optimizer


class Adam(Optimizer):
    """m = b1 m + (1-b1) g, v = b2 v + (1-b2) g², param -= lr * m̂ / (sqrt(v̂) + epsilon) with
    m̂ = m / (1 - b1^t), v̂ = v / (1 - b2^t); weight_decay is L2 (added to g), as in Paddle's Adam.

    Paddle's arguments in Paddle's order; `lazy_mode` and `multi_precision` only at their default (False),
    `name` accepted and unused."""

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        parameters: Iterable[Tensor] | None = None,
        weight_decay: float | None = None,
        grad_clip: object = None,
        lazy_mode: bool = False,
        multi_precision: bool = False,
        name: str | None = None,
    ) -> None:
        super().__init__(learning_rate, parameters, weight_decay, grad_clip)
        refuse_unsupported("Adam", lazy_mode=lazy_mode, multi_precision=multi_precision)
        for name, beta in (("beta1", beta1), ("beta2", beta2)):
            if not 0 <= beta < 1:
                raise ValueError(f"Adam: {name} must be in [0, 1), got {beta}")
        self._beta1, self._beta2, self._epsilon = beta1, beta2, epsilon
        self._steps: dict[Tensor, int] = {}

    def _update(self, param: Tensor, grad: np.ndarray, lr: float) -> None:
        b1, b2 = self._beta1, self._beta2
        t = self._steps[param] = self._steps.get(param, 0) + 1
        m, v = self._buffer(param, "moment1"), self._buffer(param, "moment2")
        m *= b1
        m += (1 - b1) * grad
        v *= b2
        v += (1 - b2) * (grad * grad)
        step = np.sqrt(v / (1 - b2**t))  # one array, updated in place into the step (no temporaries)
        step += self._epsilon
        np.divide(m, step, out=step)
        step *= lr / (1 - b1**t)
        param.subtract_(step)
