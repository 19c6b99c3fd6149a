"""Central finite differences in float64, against the engine's gradients."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import distvlog as dv


def check_gradients(
    fn: Callable[..., dv.Tensor],
    *arrays: np.ndarray,
    eps: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-7,
    seed: int = 0,
) -> None:
    """`fn(*tensors)` must give the gradient central differences give, for every float input.

    The output is weighted by fixed random numbers, so every element of the output gradient differs."""
    arrays = [np.array(a) for a in arrays]
    weights: list[np.ndarray] = []

    def loss(tensors: list[dv.Tensor]) -> dv.Tensor:
        out = fn(*tensors)
        if not weights:
            weights.append(np.random.default_rng(seed).standard_normal(out.shape))
        return (out * dv.to_tensor(weights[0], dtype=out.dtype)).sum()

    tensors = [dv.to_tensor(a, dtype=a.dtype, stop_gradient=a.dtype.kind != "f") for a in arrays]
    loss(tensors).backward()
    for i, a in enumerate(arrays):
        if a.dtype.kind != "f":
            continue
        numeric = np.zeros_like(a, dtype=np.float64)
        for idx in np.ndindex(a.shape):
            original = a[idx]
            a[idx] = original + eps
            up = float(loss([dv.to_tensor(x, dtype=x.dtype) for x in arrays]).numpy())
            a[idx] = original - eps
            down = float(loss([dv.to_tensor(x, dtype=x.dtype) for x in arrays]).numpy())
            a[idx] = original
            numeric[idx] = (up - down) / (2 * eps)
        analytic = tensors[i].grad
        assert analytic is not None, f"input {i} got no gradient"
        assert analytic.dtype == a.dtype, f"input {i}: gradient dtype {analytic.dtype}, input {a.dtype}"
        assert analytic.shape == list(a.shape), f"input {i}: gradient shape {analytic.shape}, input {a.shape}"
        np.testing.assert_allclose(analytic.numpy(), numeric, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}")
