"""The backward engine: names, scheduling, accumulation, retain_graph, grad() (only the graph between its
outputs and inputs, checked before anything runs), hooks, errors, threads, floating-point-only gradients."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import numpy as np
import pytest

import distvlog as dv
from distvlog.autograd.dispatch import PROMOTION_WARNING


def leaf(values, dtype="float64") -> dv.Tensor:
    return dv.to_tensor(np.asarray(values, dtype=dtype), dtype=dtype, stop_gradient=False)


def test_paddle_names_for_nodes_tensors_and_gradients():
    x = leaf(np.ones((2, 3)))
    a, b = x * 2, x * 3
    s = (a + b).sum()
    na, nb = int(re.fullmatch(r"multiply(\d+)GradNode", a.grad_fn.name).group(1)), int(b.grad_fn.name[8:-8])
    assert nb == na + 1, "one counter per op, one step per recorded call"
    assert a.name == f"multiply{na}_out_float64_2x3"
    assert re.fullmatch(r"sum\d+_out_float64_", s.name), "a 0-d tensor's name ends in _"
    assert re.fullmatch(r"add\d+GradNode\(0x[0-9a-f]+\)", repr((a + b).grad_fn))
    assert dv.randn([4], dtype="float32").name.startswith("randn")
    x.name = "weights"
    assert x.name == "weights"


def test_op_counters_are_exact_under_threads():
    x = leaf([1.0])
    seqs: list[int] = []

    def work():
        for _ in range(500):
            seqs.append((x * 1.0).grad_fn.seq)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seqs)) == 2000 and max(seqs) - min(seqs) == 1999


def test_stop_gradient_defaults_and_propagation():
    a = dv.randn([2])
    assert a.stop_gradient and a.is_leaf
    b = a * 2
    assert b.stop_gradient and b.grad_fn is None, "no node when no input needs a gradient"
    a.stop_gradient = False
    c = a * 2
    assert not c.stop_gradient and c.grad_fn is not None
    fresh = dv.randn([2])
    fresh.stop_gradient = False
    with dv.no_grad():
        d = a * 2
        e = fresh * 2
    assert d.stop_gradient and d.grad_fn is None and dv.is_grad_enabled()
    assert e.grad_fn is None and fresh._accum is None, "no_grad records nothing, not even a leaf's accumulation node"
    with pytest.raises(RuntimeError, match="stop_gradient=True"):
        b.sum().backward()


def test_gradients_accumulate_across_backward_calls_and_clear():
    x = leaf([1.0, 2.0])
    (x * x).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2 + 3, 4 + 3])
    x.clear_gradient()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0])
    x.clear_gradient(set_to_zero=False)
    assert x.grad is None


def test_non_scalar_backward_uses_ones_or_the_given_gradient():
    x = leaf([1.0, 2.0, 3.0])
    (x * x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2, 4, 6])
    y = leaf([1.0, 2.0])
    (y * 5).backward(dv.to_tensor(np.array([1.0, -1.0])))
    np.testing.assert_array_equal(y.grad.numpy(), [5, -5])
    with pytest.raises(ValueError, match="shape"):
        (y * 5).backward(dv.to_tensor(np.ones(3)))


def test_nodes_run_once_after_all_their_inputs_arrived():
    """Diamond: x -> a -> (b, c) -> d; a must see the sum of both paths in one run."""
    x = leaf([0.5, -1.0])
    a = dv.tanh(x)
    d = (a * 2 + dv.exp(a)).sum()
    runs = []
    a.register_hook(lambda g: runs.append(g.numpy().copy()))
    d.backward()
    assert len(runs) == 1
    ta = np.tanh([0.5, -1.0])
    np.testing.assert_allclose(runs[0], 2 + np.exp(ta))
    np.testing.assert_allclose(x.grad.numpy(), (2 + np.exp(ta)) * (1 - ta**2))


def test_saved_tensors_are_released_and_a_second_backward_names_the_node():
    x = leaf([1.0, 2.0])
    y = x * x
    node = y.grad_fn
    loss = y.sum()
    loss.backward()
    assert node.saved is None and loss.grad_fn.saved is None
    with pytest.raises(
        RuntimeError,
        match=rf"{loss.grad_fn.name}\(0x[0-9a-f]+\) \(created at test_engine\.py:\d+\):"
        r".*retain_graph=True",
    ):
        loss.backward()


def test_retain_graph_allows_a_second_backward():
    x = leaf([1.0, 2.0])
    loss = (x * x).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4, 8])


def test_grad_computes_without_touching_dot_grad():
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    h = x * w
    out = (h * h).sum()
    gx, gh = dv.grad(out, [x, h], retain_graph=True)
    np.testing.assert_allclose(gx.numpy(), 2 * (x.numpy() * w.numpy()) * w.numpy())
    np.testing.assert_allclose(gh.numpy(), 2 * h.numpy())
    assert x.grad is None and w.grad is None
    (gw,) = dv.grad([out], [w], grad_outputs=[dv.to_tensor(np.array(2.0))])
    np.testing.assert_allclose(gw.numpy(), 2 * 2 * (x.numpy() * w.numpy()) * x.numpy())


def test_grad_unused_inputs():
    x, unused = leaf([1.0]), leaf([2.0])
    out = (x * 2).sum()
    with pytest.raises(RuntimeError, match=r"input 1 .* not reachable.*allow_unused=True"):
        dv.grad(out, [x, unused], retain_graph=True)
    gx, gu = dv.grad(out, [x, unused], allow_unused=True)
    assert gu is None and float(gx.numpy()[0]) == 2


def test_hooks_see_and_may_replace_gradients():
    x = leaf([1.0, 2.0])
    h = x * 3
    seen = []
    h.register_hook(lambda g: seen.append(g.numpy().copy()))
    handle = h.register_hook(lambda g: g * 10)
    x.register_hook(lambda g: g + 1)
    h.sum().backward(retain_graph=True)
    np.testing.assert_array_equal(seen[0], [1, 1])
    np.testing.assert_array_equal(x.grad.numpy(), [31, 31])
    handle.remove()
    x.clear_gradient(set_to_zero=False)
    h.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4, 4])
    with pytest.raises(RuntimeError, match="stop_gradient=True"):
        dv.randn([1]).register_hook(lambda g: g)


def test_errors_in_backward_name_the_node_and_the_forward_line():
    x = leaf([1.0, 2.0])
    y = x * 2  # the line the error must point at
    line = test_errors_in_backward_name_the_node_and_the_forward_line.__code__.co_firstlineno + 2

    def broken(g):
        raise ValueError("boom")

    y.register_hook(broken)
    with pytest.raises(
        RuntimeError,
        match=rf"multiply\d+GradNode\(0x[0-9a-f]+\) \(created at test_engine.py:{line}\): "
        r"hook broken failed: ValueError: boom",
    ):
        y.sum().backward()


def test_a_hook_returning_the_wrong_shape_is_refused():
    x = leaf([1.0, 2.0])
    y = x * 2
    y.register_hook(lambda g: dv.to_tensor(np.ones(3)))
    with pytest.raises(RuntimeError, match=r"returned shape \[3\], expected \[2\]"):
        y.sum().backward()


def test_promotion_warns_once_per_promoting_call_and_refuses_other_mixes(records):
    x, y = dv.randn([2], dtype="float32"), dv.randn([2], dtype="float64")
    z = x * y + x
    assert z.dtype == np.float64
    warnings = [r for r in records if r["event"] == PROMOTION_WARNING]
    assert [r["severity"] for r in warnings] == ["W", "W"]
    assert warnings[0]["file"] == "test_engine.py"
    records.clear()
    assert (x * x).dtype == np.float32 and not records
    with pytest.raises(TypeError, match=r"add: cannot combine float32 and int64"):
        x + dv.to_tensor(np.array([1, 2]))


def test_promotion_inserts_recorded_cast_nodes():
    x, y = leaf([1.0], "float32"), leaf([2.0], "float64")
    z = x * y
    edges = [e.name for e in z.grad_fn.edges]
    assert edges[0].startswith("cast") and edges[0].endswith("GradNode") and edges[1] == "GradNodeAccumulation"


def test_post_accumulate_hooks_run_after_backward_updates_grad_and_never_for_grad():
    x = leaf([1.0, 2.0])
    seen = []
    handle = x.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.numpy().copy()))
    (x * 3).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_array_equal(seen[0], [3, 3])
    np.testing.assert_array_equal(seen[1], [3 + 2, 3 + 4]), "after accumulation, not before"
    dv.grad((x * 5).sum(), [x])
    assert len(seen) == 2, "grad() leaves .grad alone and fires no post-accumulate hook"
    handle.remove()
    (x * 3).sum().backward()
    assert len(seen) == 2
    with pytest.raises(RuntimeError, match="leaf tensors"):
        (x * 2).register_post_accumulate_grad_hook(lambda t: None)


def test_post_accumulate_hook_errors_reach_the_caller_as_raised():
    class Refused(Exception):
        pass

    x = leaf([1.0])

    def refuse(t):
        raise Refused("rank 3 step 7: gradient of w has NaN")

    x.register_post_accumulate_grad_hook(refuse)
    with pytest.raises(Refused, match="rank 3 step 7"):
        (x * 2).sum().backward()


def test_promotion_covers_numpy_operands_and_every_promoting_op(records):
    x32 = dv.to_tensor(np.ones((2, 3)), dtype="float32", stop_gradient=False)
    assert (x32 * np.float64(2.0)).dtype == np.float32, "numpy scalars are weak, like Python scalars"
    assert (x32 * 2.0).dtype == np.float32 and not records
    mixed = x32 + np.ones((2, 3))  # a float64 array is a tensor operand: promoted, cast recorded, warned
    assert mixed.dtype == np.float64 and mixed.grad_fn.edges[0].name.startswith("cast")
    w = dv.to_tensor(np.ones((3, 4)), dtype="float32", stop_gradient=False)
    b = dv.to_tensor(np.zeros(4), dtype="float32", stop_gradient=False)
    out = dv.nn.functional.linear(dv.to_tensor(np.ones((2, 3)), dtype="float64"), w, b)
    assert out.dtype == np.float64
    assert sum(r["event"] == PROMOTION_WARNING for r in records) == 2, "one warning per promoting call"
    out.sum().backward()
    assert w.grad.dtype == np.float32 and b.grad.dtype == np.float32


def test_gradients_handed_to_the_user_are_their_own_writable_arrays():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    (a + b).sum().backward()
    assert a.grad.numpy() is not b.grad.numpy()
    a.grad.numpy()[...] *= 0.5  # in-place clipping: allowed, and b is untouched
    np.testing.assert_array_equal(b.grad.numpy(), [1, 1])
    x = leaf(np.ones((2, 3)))
    x.sum().backward()  # the gradient is a broadcast of a scalar: must not stay a read-only view
    x.grad.numpy()[0, 0] = 7.0
    y = leaf([1.0, 2.0])
    given = np.array([5.0, 6.0])
    y.backward(dv.to_tensor(given))
    y.grad.numpy()[0] = 0
    assert given[0] == 5.0, "the given gradient is copied"


def test_a_hook_cannot_change_a_gradients_dtype():
    p = dv.to_tensor(np.ones(3), dtype="float32", stop_gradient=False)
    p.register_hook(lambda g: np.full(3, 2.0, dtype=np.float64))
    (p * 1.0).sum().backward()
    assert p.grad.dtype == np.float32
    np.testing.assert_array_equal(p.grad.numpy(), [2, 2, 2])


def test_a_leaf_changed_in_place_after_the_forward_is_refused_before_anything_runs():
    w = dv.to_tensor(np.array([1.0, 2.0, 3.0]), dtype="float64", stop_gradient=False)
    b = dv.to_tensor(np.array([1.0]), dtype="float64", stop_gradient=False)
    loss = (w * w).sum() + (b * 2.0).sum()
    loss.backward(retain_graph=True)
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0, 6.0])
    dv.optim.SGD(0.25, [w]).step()  # w changes in place; the graph still holds the old one
    with pytest.raises(
        dv.BackwardError,
        match=r"multiply\d+GradNode.*its input .* was changed in place after "
        r"the forward used it \(an optimizer step\?\): version 1, saved at 0",
    ):
        loss.backward()  # (before: w.grad += 2 * new w, silently)
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0, 6.0])  # nothing ran: not even b's part
    np.testing.assert_array_equal(b.grad.numpy(), [2.0])
    fresh = (w * w).sum()  # a new forward saves the new version
    w.clear_grad()
    fresh.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 2.0, 3.0])


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


# -- grad(): only the graph between its outputs and inputs ----------------------------------------------
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
    with pytest.raises(dv.BackwardError, match=rf"{y.grad_fn.name}.*released"):
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


# -- threads ---------------------------------------------------------------------------------------
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


# -- only floating-point tensors take gradients ----------------------------------------------------
@pytest.mark.parametrize("data", [[1, 2, 3], np.array([1, 2], np.int32), [True, False]], ids=["int64", "int32", "bool"])
def test_to_tensor_refuses_gradients_for_non_float_data(data):
    with pytest.raises(
        TypeError,
        match=r"only floating-point tensors can have gradients: to_tensor\d+_out_\w+ is "
        r"(int64|int32|bool); cast it with \.astype\('float32'\)",
    ):
        dv.to_tensor(data, stop_gradient=False)


def test_int_tensors_refuse_gradients_and_still_serve_as_labels_and_indices():
    labels = dv.to_tensor([0, 3, 1])
    labels.name = "labels"
    with pytest.raises(TypeError, match=r"only floating-point tensors can have gradients: labels is int64"):
        labels.stop_gradient = False
    assert labels.stop_gradient
    labels.stop_gradient = True  # always allowed
    logits = dv.to_tensor(np.random.default_rng(7).uniform(-2.0, 2.0, (3, 4)), dtype="float64", stop_gradient=False)
    index = dv.to_tensor([2, 0, 2])
    (dv.nn.functional.cross_entropy(logits, labels) + logits[index].sum()).backward()
    assert logits.grad is not None and labels.grad is None and index.grad is None


def test_casting_to_int_ends_the_gradient_path():
    x = dv.to_tensor([1.5, -2.5], dtype="float64", stop_gradient=False)
    y = x.astype("int64")
    assert y.stop_gradient and y.grad_fn is None
    (x * y.astype("float64")).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, -2.0])  # only the direct path
