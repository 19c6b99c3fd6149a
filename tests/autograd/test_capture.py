"""capture_backward_subgraph_guard: dot files, call stacks and gradients of the captured subgraph; labels
Graphviz reads as written, and an SVG that fails to render says so."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

import distvlog as dv


def run_captured(tmp_path, dump_grads: bool):
    x = dv.to_tensor(np.array([[1.0, 2.0, 3.0]]), dtype="float64", stop_gradient=False)
    y = dv.to_tensor(np.array([[0.5, -1.0, 2.0]]), dtype="float64", stop_gradient=False)
    a = x + y  # outside: a neighbour
    with dv.capture_backward_subgraph_guard(tmp_path / "dump", need_dump_grad_tensors=dump_grads):
        b = a * y  # captured
        c = dv.exp(b)  # captured
    loss = c.sum()  # outside: sends the gradient into the captured nodes
    loss.backward()
    return {p.name.split("_", 1)[1]: p for p in (tmp_path / "dump").iterdir()}, (a, b, c, x, y, loss)


def test_dot_files_colour_inside_outside_and_leaf_nodes(tmp_path):
    files, (a, b, c, x, y, loss) = run_captured(tmp_path, dump_grads=False)
    assert {"backward_graph.dot", "ref_forward_graph.dot", "call_stack.log"} <= set(files)
    assert "grad_tensors.log" not in files
    stamp = next(iter((tmp_path / "dump").iterdir())).name.split("_", 1)[0]
    assert re.fullmatch(r"\d{8}-\d{6}\.\d{6}-\d+-rank0", stamp)
    dot = files["backward_graph.dot"].read_text()

    def colour(node):
        return re.search(
            rf'n{id(node):x} \[label="{re.escape(node.name)}\\n0x[0-9a-f]+", fillcolor="([^"]+)"', dot
        ).group(1)

    assert colour(b.grad_fn) == colour(c.grad_fn) == "lightgrey"
    assert colour(a.grad_fn) == "orange", "a neighbour the captured nodes send gradients to"
    assert colour(loss.grad_fn) == "orange", "a neighbour that sends gradients into the captured nodes"
    assert colour(y._accum) == "turquoise3"
    assert x._accum is None or f"n{id(x._accum):x} " not in dot, "not a neighbour of the captured nodes"
    label = f'n{id(b.grad_fn):x} -> n{id(a.grad_fn):x} [label="{a.name}@Grad\\nfloat64\\n[1, 3]"]'
    assert label in dot
    ref = files["ref_forward_graph.dot"].read_text()
    assert f'n{id(a.grad_fn):x} -> n{id(b.grad_fn):x} [label="float64\\n[1, 3]"]' in ref


def test_call_stacks_and_gradients(tmp_path):
    files, (a, b, c, x, y, _) = run_captured(tmp_path, dump_grads=True)
    stacks = files["call_stack.log"].read_text()
    assert f"{b.grad_fn.name}(0x" in stacks and f"{c.grad_fn.name}(0x" in stacks and a.grad_fn.name not in stacks
    assert "in run_captured" in stacks and "b = a * y  # captured" in stacks
    grads = files["grad_tensors.log"].read_text()
    assert f"{b.name}@Grad: shape=[1, 3] dtype=float64" in grads
    assert f"{a.name}@Grad: shape=[1, 3]" in grads


def test_two_captures_in_one_second_keep_both_dumps(tmp_path):
    x = dv.to_tensor(np.ones(2), dtype="float64", stop_gradient=False)
    for op in (dv.sin, dv.cos):
        with dv.capture_backward_subgraph_guard(tmp_path):
            y = op(x)
        y.sum().backward()
    stacks = sorted(tmp_path.glob("*_call_stack.log"))
    assert len(stacks) == 2
    assert "sin" in stacks[0].read_text() and "cos" in stacks[1].read_text()


def test_only_the_next_backward_writes(tmp_path):
    x = dv.to_tensor(np.ones(2), dtype="float64", stop_gradient=False)
    with dv.capture_backward_subgraph_guard(tmp_path):
        y = x * 2
    loss = y.sum()
    loss.backward(retain_graph=True)
    first = sorted(p.name for p in tmp_path.iterdir())
    loss.backward()
    assert sorted(p.name for p in tmp_path.iterdir()) == first


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot is not installed")
def test_svg_rendered_when_graphviz_is_installed(tmp_path):
    files, _ = run_captured(tmp_path, dump_grads=False)
    assert "backward_graph.svg" in files and files["backward_graph.svg"].read_text().lstrip().startswith("<?xml")


def test_an_unusable_dump_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with (
        pytest.raises(dv.errors.InputError, match=r"cannot create .*file/sub"),
        dv.capture_backward_subgraph_guard(blocker / "sub"),
    ):
        pass


def capture_shared_weight(dump: Path, weight_name: str) -> dict[str, Path]:
    w = dv.to_tensor(np.random.default_rng(7).uniform(-2.0, 2.0, (2, 2)), dtype="float64", stop_gradient=False)
    w.name = weight_name
    with dv.capture_backward_subgraph_guard(dump):
        out = dv.tanh(w @ w)
    out.sum().backward()
    return {p.name.split("_", 1)[1]: p for p in dump.iterdir()}


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot is not installed")
def test_capture_escapes_quotes_backslashes_and_newlines_in_names(tmp_path, records):
    name = 'shared "W" C:\\w\nrow 2'
    files = capture_shared_weight(tmp_path, name)
    assert not [e for e in records if "could not render" in str(e.get("event"))]
    for graph in ("backward_graph", "ref_forward_graph"):
        assert f"{graph}.svg" in files, f"{graph}.dot did not render"
        check = subprocess.run(["dot", "-Tcanon", str(files[f"{graph}.dot"])], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    svg = files["backward_graph.svg"].read_text()
    assert "shared &quot;W&quot; C:\\w" in svg and ">row 2@Grad<" in svg, "the name shown as written, on two rows"


def test_an_svg_that_fails_to_render_is_a_warning_naming_the_dot_file(tmp_path, monkeypatch, records):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "dot"  # exits 1 as dot does on a syntax error, leaving an empty output file behind
    fake.write_text('#!/bin/sh\nfor last; do :; done\n: > "$last"\necho "Error: syntax error in line 3" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    files = capture_shared_weight(tmp_path / "dump", "W")
    warnings = [str(e["event"]) for e in records if e.get("severity") == "W" and "could not render" in str(e["event"])]
    assert len(warnings) == 2
    for graph, warning in zip(("backward_graph", "ref_forward_graph"), warnings):
        assert str(files[f"{graph}.dot"]) in warning and "Error: syntax error in line 3" in warning
        assert "\n" not in warning
    assert not [p for p in files if p.endswith(".svg")], "no empty SVG left behind"


# -- capture_fwd_graph_guard ---------------------------------------------------------------------------------
def forward_dot(directory: Path) -> str:
    (dot,) = [p for p in directory.iterdir() if p.suffix == ".dot"]
    return dot.read_text()


def boxes(dot: str) -> dict[str, str]:
    """op label (its first row: the op's unique name) -> its node id, for the op boxes of a forward graph."""
    return {label.split("\\n")[0]: op for op, label in re.findall(r'(op\d+) \[label="([^"]+)", shape=box', dot)}


def test_the_forward_capture_is_per_thread(tmp_path):
    x = dv.to_tensor(np.ones(2), dtype="float64", stop_gradient=False)
    inside, outside = threading.Barrier(2), threading.Barrier(2)

    def other():
        inside.wait()
        dv.sin(x)  # while the guard is open, in another thread
        outside.wait()

    worker = threading.Thread(target=other)
    worker.start()
    with dv.capture_fwd_graph_guard(tmp_path / "g"):
        inside.wait()
        y = dv.cos(x)
        outside.wait()
    worker.join()
    ops = boxes(forward_dot(tmp_path))
    assert list(ops) == [y.grad_fn.name.removesuffix("GradNode")], "only this thread's op"


def test_nested_forward_captures_each_get_the_inner_ops(tmp_path):
    x = dv.to_tensor(np.ones(2), dtype="float64")
    with dv.capture_fwd_graph_guard(tmp_path / "outer" / "g"):
        a = x * 2.0
        with dv.capture_forward_subgraph_guard(tmp_path / "inner" / "g"):
            b = a + 1.0
    assert list(boxes(forward_dot(tmp_path / "outer"))) == ["multiply (no grad)", "add (no grad)"]
    inner = forward_dot(tmp_path / "inner")
    assert list(boxes(inner)) == ["add (no grad)"]
    assert f'label="{a.name}\\nfloat64[2]", shape=ellipse' in inner, "a: from outside the inner region"
    assert b.name in inner and "y=1.0" in inner, "the number operand is in the op's label"


def test_an_in_place_op_hands_its_tensor_on_at_the_next_version(tmp_path):
    x = dv.to_tensor(np.ones(2), dtype="float64", stop_gradient=False)
    with dv.capture_fwd_graph_guard(tmp_path / "g"):
        y = x * 3.0
        y.add_(1.0)
        z = y * y
    dot = forward_dot(tmp_path)
    ops = boxes(dot)
    add = next(label for label in ops if label.startswith("add"))
    assert add.endswith(" (in place)")
    assert f"{ops[y.grad_fn.edges[0].name.removesuffix('GradNode')]} -> {ops[add]}" in dot, "y before the add_"
    assert dot.count(f"{ops[add]} -> {ops[z.grad_fn.name.removesuffix('GradNode')]}") == 2, "y after it, twice"


def test_the_forward_graph_is_written_when_the_region_raises_and_an_unusable_path_is_one_clear_line(tmp_path):
    x = dv.to_tensor(np.ones(2), dtype="float64")
    with pytest.raises(KeyError), dv.capture_fwd_graph_guard(tmp_path / "g"):
        x * 2.0
        raise KeyError("the user's own error")
    assert "multiply (no grad)" in forward_dot(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with (
        pytest.raises(dv.errors.InputError, match=r"capture_fwd_graph_guard: cannot create .*file/sub"),
        dv.capture_fwd_graph_guard(blocker / "sub" / "g"),
    ):
        pass
