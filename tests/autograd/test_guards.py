"""backward_vlog_guard, vlog_guard and set_vlog_level: which nodes log, at which level, in which thread."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import xxhash

import distvlog as dv
from distvlog.format import END_RECORD

ROOT = Path(__file__).resolve().parents[2]
RECORD = re.compile(r"^([IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d{6} \d+ [^:]+:\d+\] \[rank (\d+)\] ", re.M)


def node_records(records, node_prefix=""):
    return [r for r in records if str(r.get("node", "")).startswith(node_prefix) and "node" in r]


def levels_of(records, node_name):
    return {r["v"] for r in records if r.get("node") == node_name}


def leaf(*shape):
    t = dv.randn(list(shape), dtype="float64")
    t.stop_gradient = False
    return t


def split_records(text: str) -> list[str]:
    starts = [m.start() for m in RECORD.finditer(text)]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def test_the_paddle_pull_request_example_logs_only_the_multiply_node(tmp_path):
    script = textwrap.dedent("""
        import distvlog as paddle
        from distvlog import backward_vlog_guard
        x = paddle.randn([2,3],dtype="float32")
        y = paddle.randn([2,3],dtype="float64")
        x.stop_gradient = False
        y.stop_gradient = False
        z1 = x - y
        z2 = x + y
        with backward_vlog_guard(4):
            z3 = z1 * z2
        z4 = z3.sum()
        loss = z4
        loss.sum().backward()
    """)
    env = {**os.environ, "DISTVLOG_LOG_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("DISTVLOG_V", None), env.pop("GLOG_v", None)
    subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True, timeout=120)
    text = (tmp_path / "latest" / "rank-0.log").read_text()
    records = split_records(text)[1:-1]  # but the meta and end records
    assert END_RECORD in split_records(text)[-1]
    warnings = [r for r in records if r.startswith("W")]
    assert len(warnings) == 2 and all(
        "Got different data type, run type promotion automatically, this may cause data type been changed." in w
        for w in warnings
    )
    node_lines = [r for r in records if not r.startswith("W")]
    expected = [
        r"multiply1GradNode\(0x[0-9a-f]+\) begin run",
        r"=+Running_AD_API_GRAD: multiply_grad=+",
        r"\{ Input: \[ .*\( grad_out , \[\{\s+Name: multiply1_out_float64_2x3@Grad",
        r"=+Running_C\+\+_API: multiply_grad1=+",
        r"multiply_grad API kernel key: \[numpy, CPU, float64\]",
        r'multiply_grad kernel: \{"input":\[',
        r"=+Finish_C\+\+_API: multiply_grad1=+",
        r"Output: \[ .*\( grad_x , \[\{\s+Name: subtract1_out_float64_2x3@Grad.*"
        r"\( grad_y , \[\{\s+Name: add1_out_float64_2x3@Grad",
        r"=+Finish_AD_API_GRAD: multiply_grad=+",
        r"multiply1GradNode\(0x[0-9a-f]+\) Found pending node: subtract1GradNode\(0x[0-9a-f]+\)",
        r"multiply1GradNode\(0x[0-9a-f]+\) Found pending node: add1GradNode\(0x[0-9a-f]+\)",
    ]
    assert len(node_lines) == len(expected), "\n".join(node_lines)
    for line, pattern in zip(node_lines, expected):
        assert re.search(pattern, line, re.S), f"{pattern!r} not in {line!r}"
        assert "node=multiply1GradNode" in line
    assert not re.search(r"(add|subtract|cast|sum)\d+GradNode\(0x[0-9a-f]+\) (begin run|Found)", text)
    assert "GradNodeAccumulation" not in text


def test_untagged_nodes_follow_global_verbosity(records):
    x = leaf(2)
    (x * 2).sum().backward()
    assert not node_records(records), "default verbosity 0 prints nothing"
    dv.set_vlog_level(4)
    (x * 2).sum().backward()
    assert {r["node"][:3] for r in node_records(records)} >= {"mul", "sum", "Gra"}
    records.clear()
    dv.set_vlog_level(0)
    dv.set_vlog_level({"engine": 3})
    (x * 2).sum().backward()
    assert node_records(records) and {r["v"] for r in node_records(records)} == {3}, "vmodule engine=3"


def test_the_tag_sets_exactly_the_node_level_and_global_verbosity_returns_for_the_next(records):
    dv.set_vlog_level(6)
    x = leaf(2)
    with dv.backward_vlog_guard(3):
        a = dv.sin(x)
    with dv.backward_vlog_guard(0):
        b = dv.cos(a)
    c = dv.tanh(b).sum()
    c.backward()
    assert levels_of(records, a.grad_fn.name) == {3}, "the guard lowers the level too"
    assert levels_of(records, b.grad_fn.name) == set(), "guard(0) silences the node"
    tanh_node = c.grad_fn.edges[0]
    assert max(levels_of(records, c.grad_fn.name)) == 6
    assert max(levels_of(records, tanh_node.name)) == 6, "the next untagged node is back at 6"


def test_nested_guards_are_a_stack_and_sequential_guards_keep_their_levels(records):
    x = leaf(2)
    with dv.backward_vlog_guard(4):
        s = dv.sin(x)
        with dv.backward_vlog_guard(6):
            c = dv.cos(s)
        t = dv.tanh(c)  # Paddle loses the tag here; a stack keeps level 4
    with dv.backward_vlog_guard(5):
        e = dv.exp(t)
    e.sum().backward()
    assert (s.grad_fn.vlog_level, c.grad_fn.vlog_level, t.grad_fn.vlog_level, e.grad_fn.vlog_level) == (4, 6, 4, 5)
    assert max(levels_of(records, s.grad_fn.name)) == 4 and max(levels_of(records, c.grad_fn.name)) == 6
    assert max(levels_of(records, t.grad_fn.name)) == 4 and max(levels_of(records, e.grad_fn.name)) == 5
    assert dv.autograd.guards.STATE.vlog_tag is None


def test_an_exception_inside_the_guard_restores_the_outer_level():
    with dv.backward_vlog_guard(4):
        with pytest.raises(KeyError), dv.backward_vlog_guard(7):
            raise KeyError("x")
        assert dv.autograd.guards.STATE.vlog_tag == 4
    assert dv.autograd.guards.STATE.vlog_tag is None


def test_a_guard_closed_out_of_order_leaves_the_setting_to_the_guards_still_open():
    x = leaf(2)

    def tagged():
        with dv.backward_vlog_guard(5):
            yield dv.sin(x)
            yield dv.sin(x)

    def ungraded():
        with dv.no_grad():
            yield dv.sin(x)
            yield dv.sin(x)

    state = dv.autograd.guards.STATE
    it = tagged()
    next(it)
    with dv.backward_vlog_guard(3):
        assert next(it).grad_fn.vlog_level == 3  # the innermost guard is the one opened last
        assert list(it) == [] and state.vlog_tag == 3  # the generator's guard closed: the one still open says 3
        assert dv.tanh(x).grad_fn.vlog_level == 3
    assert state.vlog_tag is None and dv.tanh(x).grad_fn.vlog_level is None  # (Paddle's restore-on-exit: 5 for good)
    off = ungraded()
    assert next(off).grad_fn is None
    other = threading.Thread(target=off.close)  # a guard of this thread, closed from another one
    other.start()
    other.join()
    assert state.grad_enabled and dv.tanh(x).grad_fn is not None


@pytest.mark.parametrize("bad", [True, False, 4.0, "4", None])
def test_the_level_must_be_an_int(bad):
    with pytest.raises(TypeError, match="must be an int"), dv.backward_vlog_guard(bad):
        pass


def test_the_guard_is_per_thread(records):
    """While one thread is inside the guard, nodes another thread creates are not tagged."""
    inside, outside = threading.Barrier(2), threading.Barrier(2)
    made: dict[str, list] = {"guarded": [], "other": []}
    x = leaf(3)

    def guarded():
        with dv.backward_vlog_guard(4):
            inside.wait()
            made["guarded"].append(dv.sin(x))
            outside.wait()

    def other():
        inside.wait()
        made["other"].append(dv.cos(x))
        outside.wait()

    threads = [threading.Thread(target=guarded), threading.Thread(target=other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (g,), (o,) = made["guarded"], made["other"]
    assert g.grad_fn.vlog_level == 4 and o.grad_fn.vlog_level is None
    (g + o).sum().backward()
    assert levels_of(records, g.grad_fn.name) and not levels_of(records, o.grad_fn.name)


def test_a_tagged_node_logs_at_its_level_in_whichever_thread_runs_backward(records):
    x = leaf(2)
    with dv.backward_vlog_guard(4):
        y = dv.exp(x)
    loss = y.sum()
    worker = threading.Thread(target=loss.backward)
    worker.start()
    worker.join()
    mine = [r for r in records if r.get("node") == y.grad_fn.name]
    assert mine and max(r["v"] for r in mine) == 4
    assert {r["tid"] for r in mine} == {worker.native_id}


def test_grad_runs_the_tagged_nodes_themselves(records):
    x = leaf(2)
    with dv.backward_vlog_guard(4):
        y = x * x
    dv.grad(y.sum(), [x])
    assert any(r.get("node") == y.grad_fn.name and "begin run" in r["event"] for r in records)
    assert x.grad is None


def test_leaf_tensors_created_inside_the_guard_are_tagged(records):
    with dv.backward_vlog_guard(4):
        w = dv.randn([2], dtype="float64")
    w.stop_gradient = False
    outside = leaf(2)
    (w * outside).sum().backward()
    acc = [r for r in records if r.get("node") == "GradNodeAccumulation"]
    assert acc and any(w.name + "@Grad" in r["event"] for r in acc)
    assert not any(outside.name + "@Grad" in r["event"] for r in acc)


def test_retain_graph_logs_the_tagged_node_on_every_backward(records):
    x = leaf(2)
    with dv.backward_vlog_guard(4):
        y = x * 3
    loss = y.sum()
    loss.backward(retain_graph=True)
    loss.backward()
    begins = [r for r in records if r.get("node") == y.grad_fn.name and "begin run" in r["event"]]
    assert len(begins) == 2 and begins[0]["pass"] != begins[1]["pass"]


def test_tags_live_on_the_node_so_nothing_stale_is_left():
    x = leaf(2)
    for _ in range(50):
        with dv.backward_vlog_guard(4):
            tagged = x * 2
        del tagged  # the node is freed; a new node at the same address must not inherit anything
        assert (x * 2).grad_fn.vlog_level is None


LEVEL_CONTENT = {  # level -> (text that must appear, text that must not)
    3: (
        ["Running_AD_API_GRAD", "Finish_AD_API_GRAD", "Name: "],
        ["begin run", "Tensor_Ptr", "kernel key", "Found pending node"],
    ),
    4: (["begin run", "Tensor_Ptr", "kernel key", "Found pending node"], ["TensorInfo", "grad_stats"]),
    5: (["TensorInfo", "grad_stats"], ["ADInfo", "Add grad_output_tensor", "Stats:"]),
    6: (["ADInfo", "Add grad_output_tensor"], ["grad inputs for", "Run Backward Kernel", "Value:"]),
    7: (["Move grad inputs for", "Run Backward Kernel"], ["Value:"]),
    11: (["Value: ["], []),
}


@pytest.mark.parametrize("level", sorted(LEVEL_CONTENT))
def test_what_a_node_prints_grows_with_its_level(records, level):
    x = leaf(2, 3)
    with dv.backward_vlog_guard(level):
        y = x * dv.to_tensor(np.full((2, 3), 2.0))
    z = dv.exp(y)
    z.sum().backward()
    mine = [r for r in records if r.get("node") == y.grad_fn.name]
    text = "\n".join(r["event"] for r in mine)
    must, must_not = LEVEL_CONTENT[level]
    for piece in must:
        assert piece in text, f"level {level}: {piece!r} missing"
    for piece in must_not:
        assert piece not in text, f"level {level}: {piece!r} should not be there"
    assert max(r["v"] for r in mine) <= level


def test_gradient_statistics_at_level_5_are_structured(records):
    x = dv.to_tensor(np.array([[3.0, np.nan], [4.0, np.inf]]), dtype="float64", stop_gradient=False)
    with dv.backward_vlog_guard(5):
        y = x * 1.0
    y.sum().backward()
    stats = {r["slot"]: r for r in records if r["event"] == "grad_stats" and r.get("node") == y.grad_fn.name}
    assert set(stats) == {"grad_out", "grad_x"}
    gx = stats["grad_x"]
    assert gx["tensor"] == x.name + "@Grad" and gx["shape"] == "2x2" and gx["dtype"] == "float64"
    assert gx["norm"] == pytest.approx(2.0) and gx["nan"] == 0 and gx["inf"] == 0
    assert not {"min", "max", "mean", "checksum"} & set(gx)  # level 6's
    x2 = dv.to_tensor(np.array([3.0, 4.0]), dtype="float64", stop_gradient=False)
    with dv.backward_vlog_guard(5):
        y2 = x2 * dv.to_tensor(np.array([np.nan, np.inf]))
    y2.sum().backward()
    bad = [
        r for r in records if r["event"] == "grad_stats" and r.get("node") == y2.grad_fn.name and r["slot"] == "grad_x"
    ][0]
    assert (bad["nan"], bad["inf"]) == (1, 1)


def test_level_11_values_stop_at_24_per_tensor_whatever_its_rank(records):
    x = leaf(6, 6, 6, 6)  # numpy's own summary would print 6 per dimension: 1296 values
    with dv.backward_vlog_guard(11):
        y = dv.sin(x)
    y.sum().backward()
    dumps = [r["event"] for r in records if r.get("node") == y.grad_fn.name and "Value: " in r["event"]]
    assert dumps
    for dump in dumps:
        for values in re.findall(r"Value: (\[.*?\]) \(", dump, re.S):
            assert len(re.findall(r"-?\d+\.\d*(?:e[-+]\d+)?", values)) == 24
        assert "(1296 values, shape [6, 6, 6, 6])" in dump


def test_level_6_statistics_add_min_max_mean_and_checksum_also_for_a_gradient_a_level_5_node_described(records):
    x = dv.to_tensor(np.array([[1.0, -2.0], [3.0, 4.0]]), dtype="float64", stop_gradient=False)
    with dv.backward_vlog_guard(6):
        y = x * 2.0
    with dv.backward_vlog_guard(5):  # runs first and describes y's gradient (its grad_x) at level 5
        z = y * x
    z.sum().backward()
    stats = {(r["node"], r["slot"]): r for r in records if r["event"] == "grad_stats"}
    lean, detailed = stats[(z.grad_fn.name, "grad_x")], stats[(y.grad_fn.name, "grad_out")]
    assert lean["norm"] == detailed["norm"] == pytest.approx(np.linalg.norm(x.numpy()))
    assert "checksum" not in lean
    assert (detailed["min"], detailed["max"], detailed["mean"]) == (-2.0, 4.0, 1.5)
    assert detailed["checksum"] == xxhash.xxh3_64_hexdigest(x.numpy().tobytes())  # of the gradient, bit for bit
    gx = stats[(y.grad_fn.name, "grad_x")]
    assert gx["checksum"] == xxhash.xxh3_64_hexdigest((2 * x.numpy()).tobytes())


def test_level_5_statistics_hold_a_gradient_only_until_the_node_it_reaches_has_run(records):
    """The pass keeps an outgoing gradient's statistics for the node it flows to (computed once), not the
    gradient itself for the rest of backward."""
    import weakref

    x = leaf(4, 3)
    with dv.backward_vlog_guard(5):
        a = dv.tanh(x)
        b = dv.tanh(a)
    seen = {}
    a.register_hook(lambda g: seen.setdefault("into a", weakref.ref(g._data)) and None)
    x.register_post_accumulate_grad_hook(lambda t: seen.setdefault("alive at the leaf", seen["into a"]() is not None))
    b.sum().backward()
    assert seen["alive at the leaf"] is False
    grad_outs = [r for r in records if r["event"] == "grad_stats" and r.get("node") == a.grad_fn.name]
    assert grad_outs and all(r["norm"] > 0 for r in grad_outs)


def test_vlog_guard_shows_forward_op_lines(records):
    x = leaf(2)
    x * 2
    assert not [r for r in records if "Running_AD_API: multiply" in r["event"]]
    with dv.vlog_guard(3):
        x * 2
    with dv.vlog_guard({"ops": 3}):
        dv.exp(x)
    x * 2
    forward = [r["event"] for r in records if r["event"].startswith("Running_AD_API:")]
    assert len(forward) == 2 and "multiply" in forward[0] and "exp" in forward[1]
    assert "Input: [x: " in forward[0] and "Output: [out: multiply" in forward[0]


def test_vlog_guard_is_per_thread():
    seen = {}
    with dv.vlog_guard(5):
        t = threading.Thread(target=lambda: seen.update(level=dv.logger.level_for("distvlog.autograd.engine")))
        t.start()
        t.join()
        assert dv.logger.level_for("distvlog.autograd.engine") == 5
    assert seen["level"] == 0


def test_forward_op_lines_point_at_the_users_line(records):
    x = leaf(2)
    with dv.vlog_guard(3):
        x * 2  # this line
    line = test_forward_op_lines_point_at_the_users_line.__code__.co_firstlineno + 3
    (rec,) = [r for r in records if r["event"].startswith("Running_AD_API: multiply")]
    assert (rec["file"], rec["line"]) == ("test_guards.py", line)
