"""Every op's gradient against central finite differences in float64, broadcasting and promotion included;
the shape rules the ops share with Paddle (negative transpose axes, transpose flags on a vector)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from gradcheck import check_gradients

import distvlog as dv
import distvlog.nn.functional as F

rng = np.random.default_rng(42)


def r(*shape: int, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return rng.uniform(low, high, shape)


def away_from_zero(*shape: int) -> np.ndarray:
    return rng.uniform(0.5, 2.0, shape) * rng.choice([-1, 1], shape)


BINARY = [
    ("add", lambda x, y: x + y),
    ("subtract", lambda x, y: x - y),
    ("multiply", lambda x, y: x * y),
    ("divide", lambda x, y: x / y),
    ("add fn", dv.add),
    ("subtract fn", dv.subtract),
    ("multiply fn", dv.multiply),
    ("divide fn", dv.divide),
]
BROADCAST_SHAPES = [
    ((2, 3), (2, 3)),
    ((2, 3), (3,)),
    ((2, 1, 4), (3, 1)),
    ((1,), (2, 2)),
    ((), (2, 3)),
    ((4, 1), (1, 5)),
]


@pytest.mark.parametrize("name,fn", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("shapes", BROADCAST_SHAPES, ids=str)
def test_binary_with_broadcasting(name, fn, shapes):
    check_gradients(fn, r(*shapes[0]), away_from_zero(*shapes[1]))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x * 3.0,
        lambda x: 2.0 - x,
        lambda x: 1.5 / x,
        lambda x: x / 4,
        lambda x: 3 + x,
        lambda x: -x,
        lambda x: x**3,
        lambda x: dv.pow(x, 2.5),
    ],
    ids=["mul", "rsub", "rdiv", "div", "radd", "neg", "pow3", "pow2.5"],
)
def test_python_scalars(fn):
    check_gradients(fn, rng.uniform(0.5, 2.0, (2, 3)))


@pytest.mark.parametrize(
    "fn,low,high",
    [
        (dv.exp, -2, 2),
        (dv.log, 0.2, 3),
        (dv.sin, -3, 3),
        (dv.cos, -3, 3),
        (dv.tanh, -2, 2),
        (F.relu, -2, 2),
        (F.sigmoid, -4, 4),
        (F.tanh, -2, 2),
    ],
    ids=["exp", "log", "sin", "cos", "tanh", "relu", "sigmoid", "F.tanh"],
)
def test_unary(fn, low, high):
    x = rng.uniform(low, high, (3, 4))
    if fn is F.relu:
        x[np.abs(x) < 0.1] = 0.5  # no kink within eps
    check_gradients(fn, x)


@pytest.mark.parametrize(
    "xs,ys",
    [
        ((2, 3), (3, 4)),
        ((5, 2, 3), (3, 4)),
        ((2, 3), (5, 3, 4)),
        ((2, 1, 2, 3), (4, 3, 2)),
        ((3,), (3, 4)),
        ((2, 3), (3,)),
        ((3,), (3,)),
    ],
    ids=str,
)
def test_matmul(xs, ys):
    check_gradients(lambda x, y: x @ y, r(*xs), r(*ys))


@pytest.mark.parametrize("tx,ty", [(True, False), (False, True), (True, True)])
def test_matmul_transposed(tx, ty):
    xs, ys = ((3, 2) if tx else (2, 3)), ((4, 3) if ty else (3, 4))
    check_gradients(lambda x, y: dv.matmul(x, y, transpose_x=tx, transpose_y=ty), r(2, *xs), r(*ys))


@pytest.mark.parametrize("reduce", [dv.sum, dv.mean, dv.max])
@pytest.mark.parametrize(
    "axis,keepdim", [(None, False), (None, True), (0, False), (1, True), (-1, False), ([0, 2], False), ((0, -1), True)]
)
def test_reductions(reduce, axis, keepdim):
    x = rng.permutation(24).reshape(2, 3, 4) / 7.0  # distinct values: max has no ties
    check_gradients(lambda t: reduce(t, axis=axis, keepdim=keepdim), x)


def test_max_splits_gradient_between_ties():
    x = dv.to_tensor(np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]]), dtype="float64", stop_gradient=False)
    dv.max(x, axis=1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0.5, 0.5], [0.5, 0, 0.5]])


def test_tensor_methods():
    check_gradients(
        lambda t: t.sum(axis=1).exp().mean() + t.max() + t.log().sin().cos().tanh().mean(), rng.uniform(0.5, 2, (2, 3))
    )


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: dv.reshape(x, [4, 6]),
        lambda x: dv.reshape(x, [0, -1]),
        lambda x: x.reshape([24]),
        lambda x: dv.transpose(x, [2, 0, 1]),
        lambda x: x.transpose([1, 2, 0]),
        lambda x: x[0],
        lambda x: x[:, 1:3],
        lambda x: x[..., ::2],
        lambda x: x[dv.to_tensor([0, 1, 1])],
    ],
    ids=[
        "reshape",
        "reshape0",
        "reshape-method",
        "transpose",
        "transpose-method",
        "index",
        "slice",
        "step",
        "fancy-repeat",
    ],
)
def test_shape_ops(fn):
    check_gradients(fn, r(2, 3, 4))


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_and_log_softmax(axis):
    check_gradients(lambda x: F.softmax(x, axis=axis), r(3, 5))
    check_gradients(lambda x: F.log_softmax(x, axis=axis), r(3, 5))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("label_shape", [(6,), (6, 1)])
def test_cross_entropy(reduction, label_shape):
    labels = np.array([0, 3, 1, 4, 2, 3]).reshape(label_shape)
    check_gradients(lambda x, y: F.cross_entropy(x, y, reduction=reduction), r(6, 5) * 3, labels)


def test_cross_entropy_ignore_index_and_stability():
    labels = np.array([0, -100, 2, 1])
    check_gradients(lambda x, y: F.cross_entropy(x, y), r(4, 3), labels)
    huge = dv.to_tensor(np.array([[1000.0, -1000.0, 0.0]]), dtype="float64", stop_gradient=False)
    loss = F.cross_entropy(huge, dv.to_tensor([1]))
    loss.backward()
    assert np.isfinite(loss.numpy()) and float(loss.numpy()) == pytest.approx(2000.0)
    np.testing.assert_allclose(huge.grad.numpy(), [[1.0, -1.0, 0.0]], atol=1e-12)


def test_cross_entropy_matches_log_softmax_nll():
    x, y = r(5, 4), np.array([3, 0, 1, 1, 2])
    direct = F.cross_entropy(dv.to_tensor(x, dtype="float64"), dv.to_tensor(y)).numpy()
    manual = -F.log_softmax(dv.to_tensor(x, dtype="float64")).numpy()[np.arange(5), y].mean()
    assert float(direct) == pytest.approx(manual, rel=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(reduction):
    check_gradients(lambda x, y: F.mse_loss(x, y, reduction=reduction), r(3, 4), r(3, 4))


def test_linear_fused_and_unbiased():
    check_gradients(F.linear, r(5, 3), r(3, 4), r(4))
    check_gradients(F.linear, r(2, 5, 3), r(3, 4), r(4))
    check_gradients(lambda x, w: F.linear(x, w), r(5, 3), r(3, 4))


def test_dropout_gradient_is_its_mask():
    dv.seed(3)
    x = dv.to_tensor(np.ones((50, 40)), dtype="float64", stop_gradient=False)
    out = F.dropout(x, p=0.25)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), out.numpy())  # x is ones: out == mask
    kept = out.numpy() != 0
    assert 0.65 < kept.mean() < 0.85 and np.allclose(out.numpy()[kept], 1 / 0.75)
    assert F.dropout(x, p=0.25, training=False) is x


def test_cast_gradient_comes_back_in_the_input_dtype():
    # linear, so a large step is exact; a small one would vanish in float32 rounding
    check_gradients(lambda x: dv.cast(x, "float32").astype("float64") * 2, r(2, 3), eps=1e-2, rtol=1e-4)


def test_promotion_float32_with_float64_matches_float64_math():
    x32, y64 = r(2, 3).astype(np.float32), r(3)
    x = dv.to_tensor(x32, dtype="float32", stop_gradient=False)
    y = dv.to_tensor(y64, dtype="float64", stop_gradient=False)
    z = (x * y + x - y / (x + 3.0)).sum()
    assert z.dtype == np.float64
    z.backward()
    assert x.grad.dtype == np.float32 and y.grad.dtype == np.float64
    check_gradients(lambda a, b: a * b + a - b / (a + 3.0), x32.astype(np.float64), y64)
    a = dv.to_tensor(x32.astype(np.float64), dtype="float64", stop_gradient=False)
    b = dv.to_tensor(y64, dtype="float64", stop_gradient=False)
    (a * b + a - b / (a + 3.0)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), a.grad.numpy().astype(np.float32), rtol=1e-6)
    np.testing.assert_allclose(y.grad.numpy(), b.grad.numpy(), rtol=1e-6)


def test_shared_subexpression_and_reuse():
    """A diamond: gradients from both paths are summed before the shared node runs."""
    check_gradients(lambda x: (lambda h: h * h + dv.exp(h))(x.tanh() * 2), r(3, 3))
    check_gradients(lambda x: x * x * x, r(4))


def test_cross_entropy_refuses_labels_of_the_wrong_shape_and_unsupported_arguments():
    logits = dv.to_tensor(r(6, 5))
    with pytest.raises(ValueError, match=r"label shape \[5\] does not match input shape \[6, 5\]"):
        F.cross_entropy(logits, dv.to_tensor(np.arange(5)))
    with pytest.raises(NotImplementedError, match="soft_label=True"):
        F.cross_entropy(logits, dv.to_tensor(np.arange(6) % 5), soft_label=True)
    with pytest.raises(NotImplementedError, match="mode='downscale_in_infer'"):
        F.dropout(logits, 0.5, None, True, "downscale_in_infer")
    assert F.softmax(logits, -1, "float64").dtype == np.float64, "Paddle's third positional is dtype"


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
@pytest.mark.parametrize("fn", [lambda x, y: x**y, lambda x, y: dv.pow(x, y)], ids=["operator", "dv.pow"])
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (3,)), ((3,), (2, 3)), ((), (2, 3))], ids=str)
def test_pow_with_a_tensor_exponent_differentiates_both_operands(fn, shapes):
    check_gradients(fn, r(*shapes[0], low=0.5, high=2.0), r(*shapes[1]))


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
