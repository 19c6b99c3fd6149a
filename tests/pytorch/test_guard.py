"""distvlog.torch.backward_vlog_guard on real torch autograd: which nodes log, at which level, in which thread,
with which names, and that nothing of it can break the user's forward or backward."""

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

torch = pytest.importorskip("torch", reason="the PyTorch adapter's tests need torch (CI installs torch==2.13.0)")
import torch.nn.functional as F  # noqa: E402

import distvlog.torch as dvt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECORD = re.compile(r"^([IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d{6} \d+ [^:]+:\d+\] \[rank (\d+)\] ", re.M)
HEX = "0x[0-9a-f]+"


def begun(records) -> list[str]:
    """The nodes that logged `begin run`, in order."""
    return [r["node"] for r in records if "node" in r and str(r["event"]).endswith(") begin run")]


def levels(records, prefix: str) -> set[int]:
    return {r["v"] for r in records if str(r.get("node", "")).startswith(prefix)}


def leaf(*shape: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype, requires_grad=True)


def test_the_paddle_pull_request_example_written_in_torch_logs_only_the_multiply_node(tmp_path):
    """The example of the pull request that introduced Paddle's guard, in torch: of all the nodes, only the
    multiply node logs, with Paddle's lines in Paddle's order; its neighbours keep torch's names."""
    script = textwrap.dedent("""
        import torch
        from distvlog.torch import backward_vlog_guard
        x = torch.randn(2, 3, dtype=torch.float32)
        y = torch.randn(2, 3, dtype=torch.float64)
        x.requires_grad_()
        y.requires_grad_()
        z1 = x - y
        z2 = x + y
        with backward_vlog_guard(4):
            z3 = z1 * z2
        z4 = z3.sum()
        loss = z4
        loss.sum().backward()
    """)
    env = {**os.environ, "DISTVLOG_LOG_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True, timeout=120)
    text = (tmp_path / "latest" / "rank-0.log").read_text()
    starts = [m.start() for m in RECORD.finditer(text)]
    records = [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])][1:-1]  # but the meta and end records
    expected = [
        rf"multiply1GradNode\({HEX}\) begin run node=multiply1GradNode pass=\d+ torch_node=MulBackward0 v=4",
        r"=+Running_AD_API_GRAD: multiply_grad=+",
        r"\{ Input: \[ .*\( grad_out , \[\{\s+Name: multiply1_out_float64_2x3@Grad.*"
        r"\( x , \[\{\s+Name: SubBackward0_out_float64_2x3,.*\( y , \[\{\s+Name: AddBackward0_out_float64_2x3,",
        r"=+Running_C\+\+_API: multiply_grad1=+",
        r"multiply_grad API kernel key: \[torch, CPU, float64\]",
        r'multiply_grad kernel: \{"input":\[ [^\n]*\n\s+backend: torch,  dtype: float64,  shape: \[2, 3\]',
        r"=+Finish_C\+\+_API: multiply_grad1=+",
        r"Output: \[ .*\( grad_x , \[\{\s+Name: SubBackward0_out_float64_2x3@Grad.*"
        r"\( grad_y , \[\{\s+Name: AddBackward0_out_float64_2x3@Grad",
        r"=+Finish_AD_API_GRAD: multiply_grad=+",
        rf"multiply1GradNode\({HEX}\) Found pending node: SubBackward0\({HEX}\)",
        rf"multiply1GradNode\({HEX}\) Found pending node: AddBackward0\({HEX}\)",
    ]
    assert len(records) == len(expected), text
    for record, pattern in zip(records, expected):
        assert re.search(pattern, record, re.S), (pattern, record)


def test_every_node_of_a_composite_op_is_tagged_and_named_in_creation_order(records):
    """F.linear makes TBackward0 then AddmmBackward0: both are tagged, numbered per op, torch's name kept."""
    x, w, b = leaf(2, 3, dtype=torch.float32), leaf(4, 3, dtype=torch.float32), leaf(4, dtype=torch.float32)
    with dvt.backward_vlog_guard(4):
        out = F.linear(x, w, b)
    out.sum().backward()
    nodes = {r["node"]: r["torch_node"] for r in records if "torch_node" in r}
    names = sorted(nodes)
    assert [nodes[n] for n in names] == ["AddmmBackward0", "TBackward0"], nodes
    assert re.fullmatch(r"addmm\d+GradNode", names[0]) and re.fullmatch(r"transpose\d+GradNode", names[1])
    assert begun(records) == [names[0], names[1]]  # backward runs the addmm first


def test_the_guard_is_per_thread_and_each_thread_logs_at_its_own_level(records):
    """Two threads in guards of levels 4 and 6 and a third without one create nodes at the same time: each
    guarded thread's nodes log at its level, the third thread's log nothing."""
    x = leaf(3)
    inside, made = threading.Barrier(3), {}

    def run(name: str, op, level: int | None) -> None:
        if level is None:
            inside.wait()
            made[name] = op(x)
            return
        with dvt.backward_vlog_guard(level):
            inside.wait()  # every thread's op runs while the guards are open
            made[name] = op(x)

    threads = [
        threading.Thread(target=run, args=("sin", torch.sin, 4)),
        threading.Thread(target=run, args=("cos", torch.cos, 6)),
        threading.Thread(target=run, args=("tanh", torch.tanh, None)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (made["sin"] + made["cos"] + made["tanh"]).sum().backward()
    assert max(levels(records, "sin")) == 4 and max(levels(records, "cos")) == 6
    assert not [r for r in records if r.get("torch_node") == "TanhBackward0"]
    assert x.grad is not None and torch.allclose(x.grad, torch.cos(x) - torch.sin(x) + 1 - torch.tanh(x) ** 2)


def test_autograd_grad_runs_the_tagged_nodes_and_leaves_grad_alone(records):
    """torch.autograd.grad() runs hooks as backward() does: the tagged node logs, no `.grad` is touched."""
    x = leaf(2)
    with dvt.backward_vlog_guard(4):
        y = x * x
    (g,) = torch.autograd.grad(y.sum(), [x])
    assert [n[: len("multiply")] for n in begun(records)] == ["multiply"]
    assert x.grad is None and torch.equal(g, 2 * x.detach())


def test_in_place_ops_inside_are_tagged_also_on_a_tensor_made_outside(records):
    """`z[0] = 1` (CopySlices: Paddle's set_value, its call returns None) and `z.mul_(2)` on a tensor created
    before the guard are tagged; the clone that made the tensor is not."""
    x = leaf(2, 3)
    z = x.clone()
    with dvt.backward_vlog_guard(4):
        z[0] = 1.0
        z.mul_(2)
    z.sum().backward()
    kinds = [r["torch_node"] for r in records if "torch_node" in r and str(r["event"]).endswith("begin run")]
    assert kinds == ["MulBackward0", "CopySlices"]
    assert torch.equal(x.grad, torch.tensor([[0.0] * 3, [2.0] * 3], dtype=torch.float64))


def test_leaves_created_inside_are_tagged_and_those_from_outside_are_not(records):
    """A leaf made inside (requires_grad=True, or requires_grad_() on a tensor made inside) logs its
    gradient as GradNodeAccumulation, named like a tensor a Paddle creation API made; a leaf from outside,
    used inside, does not."""
    outside = leaf(2)
    with dvt.backward_vlog_guard(4):
        made = torch.ones(2, dtype=torch.float64, requires_grad=True)
        later = torch.zeros(2, dtype=torch.float64).requires_grad_()
        y = made * outside + later
    y.sum().backward()
    dumps = [str(r["event"]) for r in records if r.get("node") == "GradNodeAccumulation" and "Input" in str(r["event"])]
    names = sorted(set(re.findall(r"Name: (\w+)@Grad", "".join(dumps))))
    assert len(names) == 2 and names[0].startswith("ones") and names[1].startswith("requires_grad"), names
    assert all(name.endswith("_out_float64_2") for name in names)


def test_nested_guards_are_a_stack_and_the_outer_level_resumes(records):
    """guard(4){ sin; guard(6){ cos }; tanh }: sin and tanh log at 4, cos at 6."""
    x = leaf(2)
    with dvt.backward_vlog_guard(4):
        a = torch.sin(x)
        with dvt.backward_vlog_guard(6):
            b = torch.cos(a)
        c = torch.tanh(b)
    c.sum().backward()
    assert max(levels(records, "sin")) == 4 and max(levels(records, "cos")) == 6
    assert max(levels(records, "tanh")) == 4


def test_a_guard_below_level_3_logs_nothing_and_keeps_its_nodes_from_the_outer_guard(records):
    """guard(4){ sin; guard(0){ cos }; tanh }: cos is made under the inner guard, which prints nothing; the
    outer guard's later calls walk back through it and must not take it."""
    x = leaf(2)
    with dvt.backward_vlog_guard(4):
        a = torch.sin(x)
        with dvt.backward_vlog_guard(0):
            b = torch.cos(a)
        c = torch.tanh(b)
    c.sum().backward()
    assert {re.sub(r"\d+GradNode$", "", n) for n in begun(records)} == {"sin", "tanh"}


def test_a_guard_closed_out_of_order_leaves_the_level_to_the_guards_still_open(records):
    """A generator suspended inside a guard and closed after a later guard opened: the later guard's level
    stays in force."""
    x = leaf(2)

    def gen():
        with dvt.backward_vlog_guard(6):
            yield

    g = gen()
    next(g)
    with dvt.backward_vlog_guard(4):
        g.close()  # closes the guard(6), opened first
        y = torch.exp(x)
    y.sum().backward()
    assert max(levels(records, "exp")) == 4


def test_the_mode_is_installed_only_while_a_guard_that_logs_is_open():
    """One torch-function mode for all of a thread's guards, there only while one of them is 3 or more (a
    mode costs every torch call): none under a guard of level 0, none left behind."""
    depth = torch._C._len_torch_function_stack()
    with dvt.backward_vlog_guard(0):
        assert torch._C._len_torch_function_stack() == depth
        with dvt.backward_vlog_guard(4), dvt.backward_vlog_guard(5):
            assert torch._C._len_torch_function_stack() == depth + 1
        assert torch._C._len_torch_function_stack() == depth
    assert torch._C._len_torch_function_stack() == depth


def test_a_guard_closed_twice_leaves_the_outer_guard_logging(records):
    """Closing an inner guard a second time closes nothing else: the outer guard's mode stays and its nodes
    log."""
    depth = torch._C._len_torch_function_stack()
    x = leaf(2)
    with dvt.backward_vlog_guard(4):
        inner = dvt.backward_vlog_guard(5)
        inner.__enter__()
        inner.__exit__(None, None, None)
        inner.__exit__(None, None, None)
        assert torch._C._len_torch_function_stack() == depth + 1
        y = torch.exp(x)
    assert torch._C._len_torch_function_stack() == depth
    y.sum().backward()
    assert begun(records) and max(levels(records, "exp")) == 4


def test_a_custom_autograd_function_used_inside_is_tagged(records):
    """A custom Function's node (its apply is not a torch call the mode sees) is tagged once an op inside the
    guard uses its output."""

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return 2 * a * g

    x = leaf(3)
    with dvt.backward_vlog_guard(4):
        y = Square.apply(x) * 3
    y.sum().backward()
    assert [r for r in records if r.get("torch_node") == "SquareBackward" and "begin run" in str(r["event"])]
    assert torch.allclose(x.grad, 6 * x.detach())


def test_gradient_statistics_are_our_engines_fields_and_checksum(records):
    """At level 6 every gradient a node receives or sends has a grad_stats record with shape, dtype, norm,
    NaN/Inf counts, min, max, mean and the XXH3 checksum of its bytes, the forward line as site."""
    x = leaf(4, 5, dtype=torch.float32)
    with dvt.backward_vlog_guard(6):
        y, line = torch.exp(x), sys._getframe().f_lineno
    y.sum().backward()
    stats = {r["slot"]: r for r in records if r["event"] == "grad_stats"}
    out, grad_x = stats["grad_out"], stats["grad_x"]
    expected = torch.exp(x.detach()).numpy()
    assert grad_x["shape"] == "4x5" and grad_x["dtype"] == "float32" and grad_x["nan"] == 0
    assert grad_x["norm"] == pytest.approx(float(np.linalg.norm(expected)), rel=1e-5)
    assert grad_x["checksum"] == xxhash.xxh3_64_hexdigest(np.ascontiguousarray(expected))
    assert out["min"] == out["max"] == 1.0 and grad_x["site"] == f"{Path(__file__).name}:{line}"


def test_a_failing_hook_is_said_once_and_the_backward_goes_on(records, monkeypatch):
    """A sparse gradient (an Embedding with sparse=True) has no numpy view: the node's log fails, which a
    W record says once; later failures are counted, and every gradient is still right. (The count is this
    test's own: left behind, the exit hook would say it after pytest's summary.)"""
    from distvlog.torch import _nodelog

    monkeypatch.setattr(_nodelog, "_failures", {})
    emb = torch.nn.Embedding(5, 3, sparse=True)
    idx = torch.tensor([0, 2, 2])
    for _ in range(2):
        with dvt.backward_vlog_guard(4):
            out = emb(idx)
        out.sum().backward()
    warnings = [r for r in records if "the backward hook failed" in str(r["event"])]
    assert len(warnings) == 1 and "distvlog.torch" in str(warnings[0]["event"])
    assert _nodelog._failures == {"backward hook": 2}
    assert torch.equal(emb.weight.grad.to_dense()[2], torch.full((3,), 4.0))


def test_import_distvlog_does_not_import_torch():
    """The adapter is an optional extra: `import distvlog` leaves torch unimported."""
    code = "import sys, distvlog; print('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_the_mode_steps_aside_under_torch_compile():
    """Dynamo traces a function called inside a guard whole (one graph, no break): the mode passes while
    torch is compiling (the eager backend: no C++ compiler needed)."""
    x = leaf(4)
    with dvt.backward_vlog_guard(4):
        explained = torch._dynamo.explain(lambda t: torch.relu(t * 2).sum())(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


def test_a_node_that_runs_a_backward_of_its_own_still_logs_its_finish(records):
    """A node whose backward runs a nested backward through tagged nodes (reentrant, as checkpointing does):
    the nested node's lines come between the outer node's begin and its finish, and both are complete."""

    class Reentrant(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            with torch.enable_grad():
                ctx.inner = a.detach().requires_grad_()
                with dvt.backward_vlog_guard(4):
                    ctx.out = torch.sin(ctx.inner)
            return ctx.out.detach()

        @staticmethod
        def backward(ctx, g):
            return torch.autograd.grad(ctx.out, ctx.inner, g)[0]

    x = leaf(3)
    with dvt.backward_vlog_guard(4):
        y = Reentrant.apply(x) * 2
    y.sum().backward()
    lines = [(r["torch_node"], str(r["event"])) for r in records if "torch_node" in r]
    order = [
        (kind, "begin" if text.endswith("begin run") else "finish")
        for kind, text in lines
        if text.endswith("begin run") or "Finish_AD_API_GRAD" in text
    ]
    assert order == [
        ("MulBackward0", "begin"),
        ("MulBackward0", "finish"),
        ("ReentrantBackward", "begin"),
        ("SinBackward0", "begin"),
        ("SinBackward0", "finish"),
        ("AccumulateGrad", "begin"),  # the leaf the forward made inside the outer guard, reached by grad()
        ("AccumulateGrad", "finish"),
        ("ReentrantBackward", "finish"),
    ]
    assert torch.allclose(x.grad, 2 * torch.cos(x.detach()))


def test_the_engines_level_logs_every_node_as_in_our_engine(records):
    """`set_vlog_level(4)` with no guard: every node of the backward logs at 4, the parameter's accumulation
    too, named in creation order; back at 0, the next backward logs nothing and the mode is gone."""
    dvt.set_vlog_level(0)  # (a mode kept for an earlier test's nodes made out of its sight leaves here)
    depth = torch._C._len_torch_function_stack()
    w, x = leaf(3, 2), torch.randn(4, 3, dtype=torch.float64)
    dvt.name_leaves([("w", w)])
    try:
        dvt.set_vlog_level(4)
        assert torch._C._len_torch_function_stack() == depth + 1
        (x @ w).relu().sum().backward()
    finally:
        dvt.set_vlog_level(0)
    assert torch._C._len_torch_function_stack() == depth
    logged = len(records)
    (x @ w).relu().sum().backward()
    ops = [re.sub(r"\d+GradNode$", "", n) for n in begun(records)]
    assert ops == ["sum", "relu", "matmul", "GradNodeAccumulation"], ops
    assert {r["v"] for r in records if "node" in r} == {3, 4} and len(records) == logged
    assert "Name: w@Grad" in "".join(str(r["event"]) for r in records if r["node"] == "GradNodeAccumulation")


def test_a_vlog_guard_on_the_engine_reaches_autograd_grad_and_leaves_guarded_nodes_their_level(records):
    """`vlog_guard({"engine": 3})` around forward and `autograd.grad`: untagged nodes log level 3 only; a node
    tagged at 5 keeps its 5, one tagged at 1 stays silent."""
    x = leaf(3)
    with dvt.vlog_guard({"engine": 3}):
        with dvt.backward_vlog_guard(5):
            a = torch.sin(x)
        with dvt.backward_vlog_guard(1):
            b = torch.cos(a)
        c = torch.exp(b)
        torch.autograd.grad(c.sum(), x)
    assert max(levels(records, "sin")) == 5 and max(levels(records, "exp")) == 3 and levels(records, "sum") == {3}
    assert not levels(records, "cos")
    assert torch._C._len_torch_function_stack() == 0


def test_the_engines_level_from_the_environment_logs_without_a_call(tmp_path):
    """DISTVLOG_V=4 for the job: a script that only imports distvlog.torch logs its nodes and its leaf."""
    script = "import torch, distvlog.torch\nx = torch.ones(2, requires_grad=True)\n(x * 3).sum().backward()\n"
    env = {**os.environ, "DISTVLOG_LOG_DIR": str(tmp_path), "PYTHONPATH": str(ROOT), "DISTVLOG_V": "4"}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True, timeout=120)
    text = (tmp_path / "latest" / "rank-0.log").read_text()
    assert re.findall(r"(\w+)\(0x[0-9a-f]+\) begin run", text) == [
        "sum1GradNode",
        "multiply1GradNode",
        "GradNodeAccumulation",
    ]


def test_a_leaf_made_under_a_guard_keeps_its_guards_level_under_the_engines(records):
    """With the engine's level on, a leaf made under backward_vlog_guard(4) logs once, at 4, and one made
    under backward_vlog_guard(0) stays quiet; a leaf made outside logs at the engine's level."""
    try:
        dvt.set_vlog_level(3)
        outside = leaf(2)
        with dvt.backward_vlog_guard(4):
            loud = torch.ones(2, dtype=torch.float64, requires_grad=True)
        with dvt.backward_vlog_guard(0):
            quiet = torch.zeros(2, dtype=torch.float64, requires_grad=True)
        (outside * loud * quiet).sum().backward()
    finally:
        dvt.set_vlog_level(0)
    leaves = [r for r in records if r.get("node") == "GradNodeAccumulation"]
    dumps = "".join(str(r["event"]) for r in leaves if "Input" in str(r["event"]) and "Output" not in str(r["event"]))
    assert dumps.count("Name: ones") == 1 and "Name: zeros" not in dumps and dumps.count("Name: None@Grad") == 1
    assert {r["v"] for r in leaves if "begin run" in str(r["event"])} == {4}
