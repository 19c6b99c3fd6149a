"""Optimizer update rules against values worked out by hand, and gradients treated as values."""

from __future__ import annotations

import numpy as np
import pytest

import distvlog as dv

C = np.array([0.5, 3.0])  # the gradient of loss = sum(p * C) * scale is scale * C


def param(values: list[float]) -> dv.Tensor:
    return dv.to_tensor(np.array(values), dtype="float64", stop_gradient=False)


def steps(opt: dv.optim.Optimizer, p: dv.Tensor, scales: list[float]) -> list[np.ndarray]:
    seen = []
    for scale in scales:
        opt.clear_grad(set_to_zero=False)
        ((p * dv.to_tensor(C, dtype="float64")).sum() * scale).backward()
        opt.step()
        seen.append(p.numpy().copy())
    return seen


def test_sgd() -> None:
    p = param([1.0, -2.0])
    (p1,) = steps(dv.optim.SGD(learning_rate=0.1, parameters=[p]), p, [1])
    np.testing.assert_allclose(p1, [0.95, -2.3])  # p - 0.1 * C


def test_sgd_with_momentum() -> None:
    p = param([1.0, -2.0])
    p1, p2 = steps(dv.optim.SGD(learning_rate=0.1, parameters=[p], momentum=0.9), p, [1, 1])
    np.testing.assert_allclose(p1, [0.95, -2.3])  # v = C
    np.testing.assert_allclose(p2, [0.855, -2.87])  # v = 0.9 C + C = 1.9 C: p1 - 0.19 C


def test_nesterov_and_paddles_momentum_signature() -> None:
    p = param([1.0, -2.0])
    (p1,) = steps(dv.optim.Momentum(0.1, 0.9, parameters=[p], use_nesterov=True), p, [1])
    np.testing.assert_allclose(p1, [0.905, -2.57])  # step along C + 0.9 v = 1.9 C


def test_weight_decay_adds_l2_to_the_gradient() -> None:
    p = param([1.0, -2.0])
    (p1,) = steps(dv.optim.SGD(learning_rate=0.1, parameters=[p], weight_decay=0.01), p, [1])
    np.testing.assert_allclose(p1, [0.949, -2.298])  # g = C + 0.01 p = [0.51, 2.98]


def test_positional_arguments_are_paddles() -> None:
    p = param([1.0, -2.0])
    (p1,) = steps(dv.optim.SGD(0.1, [p], 0.01), p, [1])  # learning_rate, parameters, weight_decay
    np.testing.assert_allclose(p1, [0.949, -2.298])  # as in the weight decay test: no momentum
    q = param([1.0, -2.0])
    (q1,) = steps(dv.optim.Adam(0.1, 0.9, 0.999, 1e-8, [q], None, None, False, False, "adam"), q, [1])
    np.testing.assert_allclose(q1, [0.9, -2.1], rtol=1e-7)
    with pytest.raises(TypeError):
        dv.optim.SGD(0.1, [p], None, None, None, 0.9)  # momentum is keyword-only


@pytest.mark.parametrize(
    "make, argument",
    [
        (lambda p: dv.optim.SGD(0.1, [p], None, "clip"), "grad_clip"),
        (lambda p: dv.optim.Momentum(0.1, parameters=[p], weight_decay=None, grad_clip="clip"), "grad_clip"),
        (lambda p: dv.optim.Adam(parameters=[p], grad_clip="clip"), "grad_clip"),
        (lambda p: dv.optim.Adam(parameters=[p], lazy_mode=True), "lazy_mode=True"),
        (lambda p: dv.optim.Adam(parameters=[p], multi_precision=True), "multi_precision=True"),
    ],
)
def test_paddle_arguments_not_implemented_raise_naming_the_argument(make, argument) -> None:
    with pytest.raises(NotImplementedError, match=argument):
        make(param([1.0]))


def test_adam_bias_correction() -> None:
    p = param([1.0, -2.0])
    p1, p2 = steps(dv.optim.Adam(learning_rate=0.1, parameters=[p]), p, [1, 2])
    # step 1: m̂ = C, v̂ = C², so the step is lr * sign(C)
    np.testing.assert_allclose(p1, [0.9, -2.1], rtol=1e-7)
    # step 2 with gradient 2C: m = 0.09 C + 0.2 C = 0.29 C, m̂ = 0.29 C / 0.19;
    # v = 0.000999 C² + 0.004 C² = 0.004999 C², v̂ = 0.004999 C² / 0.001999
    step = 0.1 * (0.29 / 0.19) / np.sqrt(0.004999 / 0.001999)
    np.testing.assert_allclose(p2, p1 - step, rtol=1e-7)
    assert step == pytest.approx(0.0965183, abs=1e-7)


def test_grad_arrays_are_never_written_shared_or_read_only() -> None:
    a, b = param([1.0, 2.0]), param([3.0, 4.0])
    shared = np.broadcast_to(np.ones(1), (2,))  # one read-only array for both: optimizers may only read it
    a.grad, b.grad = dv.Tensor(shared), dv.Tensor(shared)
    grads = [a.grad.numpy(), b.grad.numpy()]
    for opt in (
        dv.optim.SGD(0.5, [a, b], momentum=0.9, weight_decay=0.1),
        dv.optim.Adam(0.5, parameters=[a, b], weight_decay=0.1),
    ):
        opt.step()
    np.testing.assert_array_equal(grads[0], [1.0, 1.0])
    assert a.grad.numpy() is grads[0] and b.grad.numpy() is grads[1]


def test_clear_grad_zeroes_or_drops_and_zero_grad_is_the_same() -> None:
    p, unused = param([1.0]), param([2.0])
    opt = dv.optim.SGD(learning_rate=1.0, parameters=[p, unused])
    (p * 3.0).sum().backward()
    opt.step()  # a parameter without a gradient is left alone
    np.testing.assert_array_equal(unused.numpy(), [2.0])
    opt.clear_grad()
    np.testing.assert_array_equal(p.grad.numpy(), [0.0])
    opt.zero_grad(set_to_zero=False)
    assert p.grad is None
    assert dv.optim.SGD.zero_grad is dv.optim.SGD.clear_grad


def test_learning_rate_and_constructor_errors() -> None:
    p = param([1.0])
    opt = dv.optim.SGD(learning_rate=0.1, parameters=[p])
    opt.set_lr(0.5)
    assert opt.get_lr() == 0.5
    with pytest.raises(ValueError, match="parameters=model.parameters"):
        dv.optim.Adam()
    with pytest.raises(TypeError, match="not a Tensor"):
        dv.optim.SGD(0.1, [np.zeros(2)])
    with pytest.raises(ValueError, match="beta1"):
        dv.optim.Adam(parameters=[p], beta1=1.0)
    with pytest.raises(ValueError, match="use_nesterov"):
        dv.optim.SGD(0.1, [p], use_nesterov=True)
    assert dv.optimizer is dv.optim  # paddle.optimizer


def test_a_step_changes_each_parameter_in_place_once_through_its_public_path() -> None:
    p, q = param([1.0, -2.0]), param([3.0, 4.0])
    data = p.numpy()
    opt = dv.optim.Adam(learning_rate=0.1, parameters=[p, q])
    steps(opt, p, [1, 1])
    assert p.numpy() is data, "updated in its own array"
    assert (p.inplace_version, q.inplace_version) == (2, 0), "q had no gradient: not touched"
    assert dv.is_grad_enabled() and p.is_leaf and not p.stop_gradient
