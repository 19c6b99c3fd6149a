"""The backward loop reports to observers: what they see, when, and that a pass nobody watches has none."""

from __future__ import annotations

import numpy as np
import pytest

import distvlog as dv
from distvlog.autograd import engine


def leaf(*values: float) -> dv.Tensor:
    return dv.to_tensor(np.array(values), dtype="float64", stop_gradient=False)


class Recorder(engine.Observer):
    """Writes down every call it gets, with what the task shows at node_finish."""

    def __init__(self, task: engine.GraphTask) -> None:
        self.task, self.calls = task, []

    def pass_begin(self) -> None:
        self.calls.append(("pass_begin",))

    def node_begin(self, node, grad) -> None:
        self.calls.append(("begin", node, grad.copy()))

    def node_finish(self, node, grad, outputs) -> None:
        left = {nxt: self.task.dependencies[nxt] for nxt in node.edges if nxt in self.task.dependencies}
        self.calls.append(("finish", node, [None if g is None else g.copy() for g in outputs], left))

    def pass_end(self) -> None:
        self.calls.append(("pass_end",))


@pytest.fixture
def recorders(monkeypatch):
    """A factory that watches every pass, after the shipped ones; the recorders it made, in pass order."""
    made: list[Recorder] = []

    def factory(task, tagged):
        made.append(Recorder(task))
        return [made[-1]]

    monkeypatch.setattr(engine, "PASS_OBSERVERS", [*engine.PASS_OBSERVERS, factory])
    return made


@pytest.fixture
def chosen(monkeypatch):
    """What the shipped factories chose for each pass: a list of (tagged nodes, observers) per pass."""
    seen: list[tuple[list, list]] = []
    shipped = list(engine.PASS_OBSERVERS)

    def spy(task, tagged):
        observers = [o for factory in shipped for o in factory(task, tagged)]
        seen.append((list(tagged), observers))
        return observers

    monkeypatch.setattr(engine, "PASS_OBSERVERS", [spy])
    return seen


def test_an_observer_sees_every_node_begin_and_finish_in_run_order(recorders):
    x = leaf(1.0, 2.0)
    y = x * 3.0
    z = dv.exp(y)
    loss = z.sum()
    loss.backward()
    (rec,) = recorders
    kinds = [c[0] for c in rec.calls]
    assert kinds[0] == "pass_begin" and kinds[-1] == "pass_end"
    nodes = [c[1] for c in rec.calls[1:-1]]
    order = [loss.grad_fn, z.grad_fn, y.grad_fn, x._accum]  # sum, exp, multiply, accumulation
    assert nodes == [n for n in order for _ in (0, 1)], "each node: begin, then finish, before the next"
    assert kinds[1:-1] == ["begin", "finish"] * 4
    exp_finish = rec.calls[4]
    np.testing.assert_allclose(exp_finish[2][0], np.exp([3.0, 6.0]))  # exp's output: the gradient it sends on
    np.testing.assert_allclose(rec.calls[5][2], np.exp([3.0, 6.0]))  # multiply's incoming gradient


def test_a_finished_node_shows_the_in_degree_its_next_nodes_have_left(recorders):
    x = leaf(1.0, 2.0)
    a = dv.sin(x)
    b = dv.cos(x)
    (a + b).sum().backward()
    (rec,) = recorders
    finishes = {c[1]: c[3] for c in rec.calls if c[0] == "finish"}
    first, second = [c[1] for c in rec.calls if c[0] == "finish" and c[1] in (a.grad_fn, b.grad_fn)]
    assert finishes[first] == {x._accum: 1}, "the leaf still waits for the other branch"
    assert finishes[second] == {x._accum: 0}


def test_pass_end_is_not_called_when_the_pass_fails(recorders):
    x = leaf(1.0)
    y = dv.exp(x)
    y.register_hook(lambda g: 1 / 0)
    with pytest.raises(dv.BackwardError, match="ZeroDivisionError"):
        (y * 2.0).sum().backward()
    (rec,) = recorders
    assert rec.calls[0] == ("pass_begin",) and ("pass_end",) not in rec.calls


def test_a_pass_nobody_watches_has_no_observer(chosen):
    x = leaf(1.0, 2.0)
    (dv.exp(x) * 2.0).sum().backward()
    dv.grad(dv.sin(x).sum(), [x])
    assert chosen == [([], []), ([], [])], "verbosity 0, no guard: no tagged node, no observer"


def test_a_tagged_node_below_level_3_gets_no_node_log(chosen):
    x = leaf(1.0)
    with dv.backward_vlog_guard(2):
        y = dv.exp(x)
    y.sum().backward()
    ((tagged, observers),) = chosen
    assert tagged == [y.grad_fn] and observers == [], "levels <= 2 print nothing"


def test_a_guard_or_a_capture_gives_the_pass_its_observers(chosen, tmp_path):
    x = leaf(1.0)
    with dv.backward_vlog_guard(4):
        y = dv.exp(x)
    with dv.capture_backward_subgraph_guard(tmp_path):
        z = dv.sin(y)
    z.sum().backward()
    ((tagged, observers),) = chosen
    assert set(tagged) == {y.grad_fn, z.grad_fn}
    assert [type(o).__name__ for o in observers] == ["PassLog", "_Captures"]


def test_untagged_nodes_at_the_engines_level_3_get_the_node_log(chosen):
    dv.set_vlog_level({"engine": 3})
    x = leaf(1.0)
    dv.exp(x).sum().backward()
    ((tagged, observers),) = chosen
    assert tagged == [] and [type(o).__name__ for o in observers] == ["PassLog"]


def test_found_pending_node_counts_in_degree_and_sum_or_move_per_edge(records):
    """x * x sends two gradients into one leaf: the first moves into its holder with one edge still to come,
    the second is summed into it and leaves the leaf ready."""
    x = leaf(1.0, 2.0)
    with dv.backward_vlog_guard(7):
        y = x * x
    y.sum().backward()
    mine = [r for r in records if r.get("node") == y.grad_fn.name]
    pending = [r for r in mine if "Found pending node" in r["event"]]
    moves = [r["event"].split(" grad inputs")[0].rsplit(" ", 1)[-1] for r in mine if "grad inputs for" in r["event"]]
    assert [r["in_degree"] for r in pending] == [1, 0]
    assert moves == ["Move", "Sum"]


def test_found_pending_node_says_sum_when_an_earlier_node_sent_a_gradient_there(records):
    x = leaf(1.0, 2.0)
    with dv.backward_vlog_guard(7):
        a = dv.sin(x)
        b = dv.cos(x)
    (a + b).sum().backward()
    by_node = {
        r["node"]: r["event"].split(" grad inputs")[0].rsplit(" ", 1)[-1]
        for r in records
        if "grad inputs for" in r.get("event", "")
    }
    assert sorted(by_node.values()) == ["Move", "Sum"]
    pending = {r["node"]: r["in_degree"] for r in records if "Found pending node" in r.get("event", "")}
    assert sorted(pending[n] for n in (a.grad_fn.name, b.grad_fn.name)) == [0, 1]


def test_a_passs_observers_die_with_it_without_the_garbage_collector(monkeypatch, tmp_path):
    """No reference cycle between a task and its observers: a level-5 node log holds gradients (for their
    statistics), which must go when backward returns, not when the collector next runs."""
    import gc
    import weakref

    alive: list[weakref.ref] = []
    shipped = list(engine.PASS_OBSERVERS)

    def watched(task, tagged):
        observers = [o for factory in shipped for o in factory(task, tagged)]
        alive.extend(weakref.ref(o) for o in observers)
        return observers

    monkeypatch.setattr(engine, "PASS_OBSERVERS", [watched])
    x = leaf(1.0, 2.0)
    with dv.backward_vlog_guard(5), dv.capture_backward_subgraph_guard(tmp_path / "sub"):
        y = dv.exp(x) * 2.0
    gc.disable()
    try:
        y.sum().backward(dump_backward_graph_path=tmp_path / "dump")
        assert len(alive) == 3, "the node log, the graph dump and the capture"
        assert [r() for r in alive] == [None, None, None]
    finally:
        gc.enable()
