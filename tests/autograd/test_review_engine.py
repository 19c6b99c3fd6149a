"""The engine after review: grad() runs only the graph between its outputs and inputs (never an input's own
node, never a node it does not need), checks reachability before running anything, logs a tagged leaf,
hands out writable arrays; backward() threads accumulating into one leaf lose no update."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

import distvlog as dv
from distvlog.autograd.engine import BackwardError


def leaf(values: object) -> dv.Tensor:
    return dv.to_tensor(np.asarray(values, dtype=np.float64), dtype="float64", stop_gradient=False)


def central_differences(f: Callable[[np.ndarray], float], a: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """d f / d a by central differences in float64."""
    a = np.array(a, dtype=np.float64)
    out = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        original = a[idx]
        a[idx] = original + eps
        up = f(a)
        a[idx] = original - eps
        down = f(a)
        a[idx] = original
        out[idx] = (up - down) / (2 * eps)
    return out


def assert_numeric(analytic: dv.Tensor, f: Callable[[np.ndarray], float], at: np.ndarray) -> None:
    np.testing.assert_allclose(analytic.numpy(), central_differences(f, at), rtol=1e-6, atol=1e-8)


def test_grad_wrt_an_intermediate_neither_runs_nor_frees_its_node(records):
    xs = np.array([0.3, -0.5, 1.2])
    x = leaf(xs)
    with dv.backward_vlog_guard(4):
        y = x.exp()
    z = (y * y).sum()
    (gy,) = dv.grad(z, [y])
    assert_numeric(gy, lambda ys: float((ys * ys).sum()), np.exp(xs))
    assert y.grad_fn.saved is not None, "y's node is where the gradient arrives, not a node to run"
    assert not [r for r in records if r.get("node") == y.grad_fn.name], "a node not run logs nothing"
    y.sum().backward()
    assert_numeric(x.grad, lambda a: float(np.exp(a).sum()), xs)

    y2 = x.exp()  # an input reached through another input: the first one's node runs to reach the second
    gy2, gx2 = dv.grad((y2 * y2).sum(), [y2, x])
    assert_numeric(gy2, lambda ys: float((ys * ys).sum()), np.exp(xs))
    assert_numeric(gx2, lambda a: float((np.exp(a) ** 2).sum()), xs)


def test_grad_refuses_an_unused_input_before_running_anything():
    x, unused = leaf([1.0, -2.0]), leaf([3.0])
    z = (x * x).sum()
    with pytest.raises(RuntimeError, match=r"input 1 .* not reachable.*allow_unused=True"):
        dv.grad(z, [x, unused])
    assert z.grad_fn.saved is not None and z.grad_fn.edges[0].saved is not None
    gx, gu = dv.grad(z, [x, unused], allow_unused=True)
    assert gu is None
    assert_numeric(gx, lambda a: float((a * a).sum()), np.array([1.0, -2.0]))


def test_grad_runs_only_the_nodes_leading_to_its_inputs_and_backward_refuses_a_released_one():
    xs = np.array([0.5, 2.0])
    x, w = leaf(xs), leaf([1.0, 1.5])
    y = w.exp()
    y.sum().backward()  # releases exp's saved tensors
    branch = y.sum()
    z = (x * x).sum() + branch
    (gx,) = dv.grad(z, [x], retain_graph=True)
    assert_numeric(gx, lambda a: float((a * a).sum()), xs)
    assert branch.grad_fn.saved is not None, "a node through which no input is reached does not run"
    # backward() runs every node it reaches: each leads to a leaf's `.grad` (here w's), so a released one
    # there would lose part of a gradient; it refuses, before running anything.
    with pytest.raises(BackwardError, match=rf"{y.grad_fn.name}.*released"):
        z.backward()
    assert x.grad is None


def test_grad_logs_a_tagged_leaf_receiving_its_gradient_without_touching_dot_grad(records):
    with dv.backward_vlog_guard(4):
        x = dv.to_tensor(np.array([1.0, -1.0]), dtype="float64", stop_gradient=False)
    (gx,) = dv.grad((x * x).sum(), [x])
    acc = [r["event"] for r in records if r.get("node") == "GradNodeAccumulation"]
    assert any("begin run" in e for e in acc) and any("Finish_AD_API_GRAD" in e for e in acc)
    assert any(x.name + "@Grad" in e for e in acc)
    assert x.grad is None
    assert_numeric(gx, lambda a: float((a * a).sum()), np.array([1.0, -1.0]))


def test_grad_hands_out_writable_arrays_copied_only_when_read_only():
    x = leaf(np.ones((2, 3)))
    for reduce in (dv.Tensor.sum, dv.Tensor.mean):  # their gradients are broadcast (read-only) views
        (g,) = dv.grad(reduce(x), [x])
        g.numpy()[0, 0] = 7.0
        assert g.numpy()[0, 1] == (1.0 if reduce is dv.Tensor.sum else 1 / 6)
    seen = []
    x.register_hook(lambda t: seen.append(t.numpy()))
    (g,) = dv.grad(((x * 3) * (x * 3)).sum(), [x])
    assert g.numpy() is seen[0], "a writable gradient is handed out as it is, not copied"
    assert_numeric(g, lambda a: float(((a * 3) ** 2).sum()), np.ones((2, 3)))


def test_threads_running_backward_into_one_leaf_lose_no_update():
    w = leaf(np.zeros((300, 300)))  # (its accumulation node is made by whichever thread comes first)
    steps, start, errors = 150, threading.Barrier(2), []

    def work() -> None:
        try:
            start.wait()
            for _ in range(steps):
                (w * 1.0).sum().backward()
        except BaseException as exc:  # noqa: BLE001 (reported by the main thread's assertion)
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    np.testing.assert_array_equal(w.grad.numpy(), np.full((300, 300), 2.0 * steps))
