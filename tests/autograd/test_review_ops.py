"""Regressions from an ops review: negative transpose axes, integer leaves, 1-D matmul transposes, tensor
exponents, and capture dumps of tensors whose names Graphviz must not read as syntax."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gradcheck import check_gradients

import distvlog as dv

rng = np.random.default_rng(7)


def r(*shape: int) -> np.ndarray:
    return rng.uniform(-2.0, 2.0, shape)


# -- transpose: negative axes in perm --------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape,perm",
    [((3, 3), [-1, 0]), ((3, 3, 3), [0, -1, 1]), ((2, 3, 4), [0, -1, 1]), ((2, 3, 4), [-1, 0, 1]), ((4, 2), [-1, 0])],
    ids=str,
)
def test_transpose_with_negative_axes(shape, perm):
    check_gradients(lambda x: dv.transpose(x, perm), r(*shape))
    check_gradients(lambda x: x.transpose(perm), r(*shape))


@pytest.mark.parametrize("perm", [[0, 1], [0, 0, 1], [0, -3, 1], [0, 1, 3], [2, -1, 0]], ids=str)
def test_transpose_refuses_a_perm_that_is_not_a_permutation_of_the_axes(perm):
    with pytest.raises(
        ValueError, match=r"transpose: perm must be a permutation of the 3 axes of x .*got perm=" + re.escape(str(perm))
    ):
        dv.transpose(dv.to_tensor(r(2, 3, 4)), perm)


# -- only floating-point tensors take gradients ----------------------------------------------------------
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
    logits = dv.to_tensor(r(3, 4), dtype="float64", stop_gradient=False)
    index = dv.to_tensor([2, 0, 2])
    (dv.nn.functional.cross_entropy(logits, labels) + logits[index].sum()).backward()
    assert logits.grad is not None and labels.grad is None and index.grad is None


def test_casting_to_int_ends_the_gradient_path():
    x = dv.to_tensor([1.5, -2.5], dtype="float64", stop_gradient=False)
    y = x.astype("int64")
    assert y.stop_gradient and y.grad_fn is None
    (x * y.astype("float64")).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, -2.0])  # only the direct path


# -- matmul: transpose flags on a 1-D operand are ignored, as in Paddle ----------------------------------
@pytest.mark.parametrize(
    "xs,ys,tx,ty",
    [
        ((3,), (3, 4), True, False),
        ((3,), (4, 3), True, True),
        ((2, 3), (3,), False, True),
        ((3, 2), (3,), True, True),
        ((5, 2, 3), (3,), False, True),
        ((3,), (5, 3, 4), True, False),
        ((3,), (3,), True, True),
    ],
    ids=str,
)
def test_matmul_transpose_flags_on_a_vector_are_ignored(xs, ys, tx, ty):
    x, y = r(*xs), r(*ys)
    expected = np.matmul(
        np.swapaxes(x, -1, -2) if tx and x.ndim > 1 else x, np.swapaxes(y, -1, -2) if ty and y.ndim > 1 else y
    )
    out = dv.matmul(dv.to_tensor(x, dtype="float64"), dv.to_tensor(y, dtype="float64"), transpose_x=tx, transpose_y=ty)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)
    check_gradients(lambda a, b: dv.matmul(a, b, transpose_x=tx, transpose_y=ty), x, y)


# -- pow with a tensor exponent, and a number or array base (__rpow__) ------------------------------------
def positive(*shape: int) -> np.ndarray:
    return rng.uniform(0.5, 2.0, shape)


@pytest.mark.parametrize("fn", [lambda x, y: x**y, lambda x, y: dv.pow(x, y)], ids=["operator", "dv.pow"])
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (3,)), ((3,), (2, 3)), ((), (2, 3))], ids=str)
def test_pow_with_a_tensor_exponent_differentiates_both_operands(fn, shapes):
    check_gradients(fn, positive(*shapes[0]), r(*shapes[1]))


@pytest.mark.parametrize(
    "fn",
    [lambda y: 2.0**y, lambda y: 3**y, lambda y: dv.pow(0.5, y), lambda y: np.array([1.5, 2.5, 0.7]) ** y],
    ids=["float", "int", "dv.pow", "ndarray"],
)
def test_number_base_to_a_tensor_power(fn):
    check_gradients(fn, r(2, 3))
    out = fn(dv.to_tensor(np.ones((2, 3)), dtype="float64"))
    assert isinstance(out, dv.Tensor) and out.dtype == np.float64


def test_pow_at_a_zero_base_has_finite_gradients():
    check_gradients(lambda x, y: x**y, np.zeros(3), np.array([2.0, 3.0, 4.0]))  # d/dy 0**y = 0 for y > 0
    check_gradients(lambda x: x**0, np.array([0.0, 1.0]))  # not 0 * 0**-1 = NaN


# -- capture dumps: labels Graphviz reads as written, and an SVG that fails to render says so -------------
def capture_shared_weight(dump: Path, weight_name: str) -> dict[str, Path]:
    w = dv.to_tensor(r(2, 2), dtype="float64", stop_gradient=False)
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
