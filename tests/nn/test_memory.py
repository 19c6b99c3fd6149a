"""Memory: a backward frees what the forward saved (unless retain_graph); training does not grow memory."""

from __future__ import annotations

import gc
import tracemalloc
import weakref

import numpy as np

import distvlog as dv
from distvlog import nn
from distvlog.nn import functional as F


def graph_nodes(t: dv.Tensor) -> list[dv.GradNode]:
    seen, stack = {t.grad_fn}, [t.grad_fn]
    while stack:
        for nxt in stack.pop().edges:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return [n for n in seen if not isinstance(n, dv.AccumulationNode)]


def forward(model: nn.Layer) -> tuple[dv.Tensor, list[weakref.ref]]:
    """The loss, and weak references to the arrays its graph saved that only the graph holds (not the
    parameters' own arrays)."""
    x, y = dv.randn([16, 8]), dv.to_tensor(np.arange(16) % 3)
    loss = F.cross_entropy(model(x), y)
    params = {id(p.numpy()) for p in model.parameters()}
    saved = [
        weakref.ref(a)
        for node in graph_nodes(loss)
        for a in node.saved
        if isinstance(a, np.ndarray) and id(a) not in params
    ]
    return loss, saved


def mlp() -> nn.Layer:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def test_backward_releases_saved_tensors() -> None:
    loss, saved = forward(mlp())
    nodes = graph_nodes(loss)
    assert len(nodes) == 4 and len(saved) >= 4 and all(r() is not None for r in saved)
    loss.backward()
    gc.collect()
    assert all(node.saved is None for node in nodes)
    assert [r for r in saved if r() is not None] == []


def test_retain_graph_keeps_them_for_a_second_backward() -> None:
    model = mlp()
    loss, saved = forward(model)
    loss.backward(retain_graph=True)
    first = [p.grad.numpy().copy() for p in model.parameters()]
    gc.collect()
    assert all(r() is not None for r in saved)
    loss.backward()  # gradients accumulate: twice the first
    for p, g in zip(model.parameters(), first):
        np.testing.assert_allclose(p.grad.numpy(), 2 * g, rtol=1e-6)
    del loss
    gc.collect()
    assert [r for r in saved if r() is not None] == []


def test_peak_memory_does_not_grow_over_1000_training_steps() -> None:
    dv.seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 4))
    opt = dv.optim.SGD(learning_rate=0.01, parameters=model.parameters(), momentum=0.9)
    x, y = dv.randn([32, 32]), dv.to_tensor(np.arange(32) % 4)

    def train(n: int) -> tuple[int, int]:
        tracemalloc.reset_peak()
        for _ in range(n):
            opt.clear_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        return tracemalloc.get_traced_memory()

    train(1000)  # untraced warm-up: optimizer state, caches, and CPython's object free lists fill to their bound
    tracemalloc.start()
    try:
        early_current, early_peak = train(100)
        late_current, late_peak = train(900)
    finally:
        tracemalloc.stop()
    assert late_peak <= early_peak * 1.05 + 16_384, (early_peak, late_peak)
    assert late_current <= early_current + 16_384, (early_current, late_current)
