"""distvlog.torch.capture_backward_subgraph_guard on real torch autograd: the captured nodes' graph, forward
stacks and gradients, written once by the backward that runs them; a dump that fails never breaks it."""

from __future__ import annotations

import gc
import re
import shutil
import threading
import weakref

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch adapter's tests need torch (CI installs torch==2.13.0)")
import distvlog.torch as dvt  # noqa: E402


def captured(tmp_path, dump_grads: bool = False):
    """x - y and x + y outside, their product and its exp captured, the sum outside."""
    x = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64, requires_grad=True)
    a, s = x - y, x + y
    with dvt.capture_backward_subgraph_guard(tmp_path / "dump", need_dump_grad_tensors=dump_grads):
        b = a * s  # captured
        c = torch.exp(b)  # captured
    return x, y, a, s, b, c


def dumped(tmp_path) -> dict:
    return {p.name.split("_", 1)[1]: p for p in (tmp_path / "dump").iterdir()}


def test_the_dot_files_colour_captured_nodes_their_neighbours_and_leaves(tmp_path):
    """Captured nodes grey, the nodes they send gradients to orange, a leaf's accumulation teal; each edge
    labelled with the gradient's name, dtype and dims, reversed in the forward graph; nodes by their address."""
    x, y, a, s, b, c = captured(tmp_path)
    c.sum().backward()
    dot = dumped(tmp_path)["backward_graph.dot"].read_text()

    def colour(fn) -> str:
        return re.search(rf'n{id(fn):x} \[label="(\w+)\\n0x{id(fn):x}", fillcolor="([^"]+)"', dot).group(2)

    assert colour(b.grad_fn) == colour(c.grad_fn) == "lightgrey"
    assert colour(a.grad_fn) == colour(s.grad_fn) == "orange"
    assert "turquoise3" not in dot  # no captured node sends to a leaf
    assert (
        f'n{id(b.grad_fn):x} -> n{id(a.grad_fn):x} [label="SubBackward0_out_float64_1x3@Grad\\nfloat64\\n[1, 3]"]'
        in dot
    )
    ref = dumped(tmp_path)["ref_forward_graph.dot"].read_text()
    assert f'n{id(a.grad_fn):x} -> n{id(b.grad_fn):x} [label="float64\\n[1, 3]"]' in ref


def test_a_captured_node_that_sends_to_a_leaf_shows_its_accumulation(tmp_path):
    """A leaf used inside: its AccumulateGrad is drawn teal, named as `name_leaves` named it."""
    w = torch.ones(3, requires_grad=True)
    dvt.name_leaves([("w", w)])
    with dvt.capture_backward_subgraph_guard(tmp_path / "dump"):
        out = (w * 2).sum()
    out.backward()
    dot = dumped(tmp_path)["backward_graph.dot"].read_text()
    assert re.search(r'\[label="GradNodeAccumulation\\n0x[0-9a-f]+", fillcolor="turquoise3"\]', dot)
    assert 'label="w@Grad\\nfloat32\\n[3]"' in dot


def test_call_stacks_and_gradients_are_those_of_the_forward_and_the_backward(tmp_path):
    """call_stack.log has each captured node's whole forward stack; grad_tensors.log the gradients each
    captured node received and sent, equal to torch's."""
    x, y, a, s, b, c = captured(tmp_path, dump_grads=True)
    for t in (a, s, b):
        t.retain_grad()
    c.sum().backward()
    stacks = dumped(tmp_path)["call_stack.log"].read_text()
    assert "MulBackward0(0x" in stacks and "ExpBackward0(0x" in stacks and "SubBackward0" not in stacks
    assert "in captured" in stacks and "b = a * s  # captured" in stacks
    text = dumped(tmp_path)["grad_tensors.log"].read_text()
    grads = dict(re.findall(r"(\S+)@Grad: shape=\[1, 3\] dtype=float64\n(\[\[[^\]]*\]\])", text))
    assert np.allclose(eval(grads["SubBackward0_out_float64_1x3"])[0], a.grad.numpy()[0])
    assert np.allclose(eval(grads["AddBackward0_out_float64_1x3"])[0], s.grad.numpy()[0])
    assert np.allclose(eval(grads["MulBackward0_out_float64_1x3"])[0], b.grad.numpy()[0])


def test_only_the_first_backward_that_runs_them_writes_also_under_autograd_grad(tmp_path):
    """`autograd.grad` writes the dump; a second pass over the retained graph writes nothing more."""
    x, y, a, s, b, c = captured(tmp_path)
    torch.autograd.grad(c.sum(), x, retain_graph=True)
    torch.autograd.grad(c.sum(), x)
    assert sorted(dumped(tmp_path)) == sorted(
        ["backward_graph.dot", "backward_graph.svg", "ref_forward_graph.dot", "ref_forward_graph.svg", "call_stack.log"]
        if shutil.which("dot")
        else ["backward_graph.dot", "ref_forward_graph.dot", "call_stack.log"]
    )


def test_a_dump_that_cannot_be_written_is_said_once_and_the_backward_goes_on(tmp_path, records):
    """The dump directory removed before backward: one W record, every gradient still right."""
    x, y, a, s, b, c = captured(tmp_path)
    shutil.rmtree(tmp_path / "dump")
    c.sum().backward()
    warnings = [r for r in records if "backward subgraph capture failed" in str(r["event"])]
    assert len(warnings) == 1
    expected = torch.exp((x - y) * (x + y)).detach() * 2 * x.detach()
    assert torch.allclose(x.grad, expected)


def test_the_capture_is_per_thread(tmp_path):
    """A thread's capture takes only its own nodes: another thread's, made while it is open, stay out."""
    x, made = torch.ones(2, requires_grad=True), {}
    capture_open, other_done = threading.Event(), threading.Event()

    def other():
        capture_open.wait()
        made["cos"] = torch.cos(x)
        other_done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with dvt.capture_backward_subgraph_guard(tmp_path / "dump"):
        capture_open.set()
        other_done.wait()
        inside = torch.sin(x)
    thread.join()
    (inside + made["cos"]).sum().backward()
    stacks = dumped(tmp_path)["call_stack.log"].read_text()
    assert "SinBackward0" in stacks and "CosBackward0" not in stacks


def test_a_capture_never_run_by_a_backward_leaves_no_graph_behind(tmp_path):
    """A capture holds its nodes only while a backward runs them: a graph dropped without backward is freed
    (its saved tensors with it), and nothing is written."""
    a = torch.randn(1000, requires_grad=True) * 1
    saved = weakref.ref(a)
    with dvt.capture_backward_subgraph_guard(tmp_path / "dump"):
        b = torch.sin(a)  # SinBackward0 saves a
    del a, b
    gc.collect()
    assert saved() is None and not list((tmp_path / "dump").iterdir())


def test_a_backward_that_fails_leaves_no_graph_behind_and_the_next_one_writes(tmp_path):
    """A backward that raises after running a captured node (torch then never ends its pass): the graph is
    still freed once dropped, and the next backward through captured nodes writes the dump."""

    class Fails(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, g):
            raise RuntimeError("bad backward")

    a = torch.randn(1000, requires_grad=True) * 1
    saved = weakref.ref(a)
    failing = Fails.apply(a)  # made before sin: torch runs it after sin
    with dvt.capture_backward_subgraph_guard(tmp_path / "dump"):
        b = torch.sin(a)
    with pytest.raises(RuntimeError, match="bad backward"):
        (b.sum() + failing.sum()).backward(retain_graph=True)
    assert not list((tmp_path / "dump").iterdir())
    del failing
    b.sum().backward()
    assert "SinBackward0" in dumped(tmp_path)["call_stack.log"].read_text()
    del a, b
    gc.collect()
    assert saved() is None
