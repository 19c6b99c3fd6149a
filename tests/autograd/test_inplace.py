"""In-place ops (`x.add_(y)`, `set_value`, `cast_`): the tensor's own data changes, its version goes up, a
recorded in-place op gives correct gradients, and a backward needing old values refuses before it runs."""

from __future__ import annotations

import re

import numpy as np
import pytest
from gradcheck import check_gradients

import distvlog as dv

rng = np.random.default_rng(11)


def r(*shape: int, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return rng.uniform(low, high, shape)


def t64(values: object, stop_gradient: bool = True) -> dv.Tensor:
    return dv.to_tensor(np.asarray(values, dtype=np.float64), dtype="float64", stop_gradient=stop_gradient)


# name -> (in-place call, the same computed out of place with numpy, input range)
UNARY = {
    "exp_": (lambda t: t.exp_(), np.exp, (-1, 1)),
    "log_": (lambda t: t.log_(), np.log, (0.5, 2)),
    "sqrt_": (lambda t: t.sqrt_(), np.sqrt, (0.5, 2)),
    "tanh_": (lambda t: t.tanh_(), np.tanh, (-2, 2)),
    "sin_": (lambda t: t.sin_(), np.sin, (-2, 2)),
    "cos_": (lambda t: t.cos_(), np.cos, (-2, 2)),
    "scale_": (lambda t: t.scale_(3.0, 0.5), lambda a: a * 3.0 + 0.5, (-2, 2)),
    "scale_ bias first": (lambda t: t.scale_(3.0, 0.5, bias_after_scale=False), lambda a: (a + 0.5) * 3.0, (-2, 2)),
    "clip_": (lambda t: t.clip_(-0.5, 0.7), lambda a: np.clip(a, -0.5, 0.7), (-2, 2)),
    "clip_ above only": (lambda t: t.clip_(max=0.7), lambda a: np.minimum(a, 0.7), (-2, 2)),
    "fill_": (lambda t: t.fill_(2.5), lambda a: np.full_like(a, 2.5), (-2, 2)),
    "zero_": (lambda t: t.zero_(), np.zeros_like, (-2, 2)),
    "pow_": (lambda t: t.pow_(3), lambda a: a**3, (-2, 2)),
}
BINARY = {
    "add_": (lambda t, y: t.add_(y), np.add),
    "subtract_": (lambda t, y: t.subtract_(y), np.subtract),
    "multiply_": (lambda t, y: t.multiply_(y), np.multiply),
    "divide_": (lambda t, y: t.divide_(y), np.divide),
    "pow_": (lambda t, y: t.pow_(y), np.power),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_a_unary_in_place_op_changes_the_data_itself_and_bumps_the_version(name):
    call, reference, (low, high) = UNARY[name]
    a = r(2, 3, low=low, high=high)
    t = t64(a)
    data = t.numpy()
    assert call(t) is t
    assert t.numpy() is data, "the same array, changed in place"
    np.testing.assert_allclose(data, reference(a), rtol=1e-12)
    assert t.inplace_version == 1


@pytest.mark.parametrize("name", sorted(BINARY))
def test_a_binary_in_place_op_takes_tensors_scalars_and_broadcasts_the_operand(name):
    call, reference = BINARY[name]
    a, b = r(2, 3, low=0.5, high=2), r(3, low=0.5, high=2)
    t = t64(a)
    call(t, t64(b))
    call(t, 2.0)
    np.testing.assert_allclose(t.numpy(), reference(reference(a, b), 2.0), rtol=1e-12)
    assert t.inplace_version == 2 and t.shape == [2, 3]


def test_an_in_place_op_keeps_the_tensors_dtype_and_refuses_to_change_its_shape():
    t = dv.to_tensor(np.ones(3), dtype="float32")
    t.add_(t64([0.5, 1.5, 2.5]))
    assert t.dtype == np.float32
    np.testing.assert_array_equal(t.numpy(), np.array([1.5, 2.5, 3.5], dtype=np.float32))
    with pytest.raises(ValueError, match=r"add_ into .* float32 \[3\]: .*broadcast"):
        t.add_(t64(np.ones((2, 3))))
    ints = dv.to_tensor([1, 2, 3])
    with pytest.raises(TypeError, match=r"divide_ into to_tensor\d+_out_int64_3 int64 \[3\]"):
        ints.divide_(2)
    assert t.inplace_version == 1 and ints.inplace_version == 0, "a refused op changes nothing"


def shift(x, y):
    t = x * 1.0  # a non-leaf: in-place ops on it are recorded
    t.subtract_(y)
    t.multiply_(y)
    return t


@pytest.mark.parametrize(
    "fn",
    [
        shift,
        lambda x, y: (x * 1.0).add_(y).exp_(),
        lambda x, y: (x * 2.0).divide_(y).tanh_(),
        lambda x, y: (x * y).pow_(y),
        lambda x, y: (x + y).scale_(-1.5, 0.25).clip_(-4.0, -1.5),
        lambda x, y: (x * y).sqrt_() * y,
        lambda x, y: (x * 1.0).fill_(3.0) * y + x,
        lambda x, y: dv.to_tensor(np.ones((2, 3))).multiply_(x).add_(y),  # stop_gradient target, operands need grad
    ],
    ids=[
        "subtract_ multiply_",
        "add_ exp_",
        "divide_ tanh_",
        "pow_ tensor",
        "scale_ clip_",
        "sqrt_",
        "fill_",
        "target",
    ],
)
def test_gradients_through_recorded_in_place_ops_match_finite_differences(fn):
    check_gradients(fn, r(2, 3, low=0.5, high=2.0), r(2, 3, low=0.5, high=2.0))


def test_a_recorded_in_place_op_becomes_the_tensors_producer_and_keeps_its_name():
    x = t64([1.0, 2.0], stop_gradient=False)
    y = x * 3.0
    name, first = y.name, y.grad_fn
    y.add_(1.0)
    assert y.name == name, "a tensor keeps its name through in-place ops"
    assert y.grad_fn is not first and y.grad_fn.name.startswith("add") and y.grad_fn.edges[0] is first
    assert not y.stop_gradient and not y.is_leaf


def test_a_leaf_that_requires_grad_cannot_change_in_place_while_recording_but_can_under_no_grad():
    w = t64([1.0, 2.0], stop_gradient=False)
    with pytest.raises(RuntimeError, match=r"add_: .* is a leaf tensor that requires grad.*under no_grad\(\)"):
        w.add_(1.0)
    assert w.inplace_version == 0
    with dv.no_grad():
        w.add_(1.0)
    np.testing.assert_array_equal(w.numpy(), [2.0, 3.0])
    assert w.inplace_version == 1 and w.is_leaf


def test_a_backward_through_a_tensor_changed_in_place_is_refused_before_anything_runs():
    x = t64([1.0, 2.0], stop_gradient=False)
    y = x * 3.0
    z = y * y  # saves y
    y.add_(1.0)
    with pytest.raises(
        dv.BackwardError,
        match=rf"{z.grad_fn.name}.*: its input {y.name} was changed in place after the forward used it: "
        r"version 1, saved at 0",
    ):
        z.sum().backward()
    assert x.grad is None


def test_a_nodes_own_output_changed_in_place_is_refused_too():
    x = t64([0.5, 1.0], stop_gradient=False)
    y = dv.exp(x)  # exp's backward reads its output
    exp_node = y.grad_fn
    y.multiply_(2.0)
    loss = y.sum()
    del y  # the node keeps its output's version counter, not the tensor (which holds the node)
    with pytest.raises(dv.BackwardError, match=rf"{exp_node.name}.*its output {exp_node.out_name} was changed"):
        loss.backward()


def test_views_share_their_datas_version():
    x = t64(np.arange(6.0).reshape(2, 3))
    v = x.reshape([3, 2])
    row = x[0]
    d = x.detach()
    v.add_(1.0)
    assert x.inplace_version == v.inplace_version == row.inplace_version == d.inplace_version == 1
    np.testing.assert_array_equal(row.numpy(), [1.0, 2.0, 3.0])
    d.zero_()
    assert x.inplace_version == 2 and not x.numpy().any()
    copy = x * 1.0
    copy.add_(1.0)
    assert x.inplace_version == 2, "an op's own output is not a view"


def test_a_change_through_a_view_is_seen_by_the_backward_that_saved_the_base():
    w = t64([1.0, 2.0, 3.0], stop_gradient=False)
    x = t64([4.0, 5.0, 6.0])
    loss = (w * x).sum()  # saves x for w's gradient
    x[0:2].add_(1.0)
    with pytest.raises(dv.BackwardError, match=rf"its input {x.name} was changed in place"):
        loss.backward()


def test_a_recorded_in_place_op_on_a_view_is_refused():
    x = t64([1.0, 2.0, 3.0], stop_gradient=False)
    y = x * 1.0
    v = y[0:2]
    with pytest.raises(RuntimeError, match=rf"add_: {v.name} shares its data with {y.name}.*clone\(\)"):
        v.add_(t64([1.0, 1.0], stop_gradient=False))
    c = v.clone()
    c.add_(1.0)
    (c.sum() + y.sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 1.0])


def test_set_value_copies_casts_and_bumps_the_version_and_is_not_recorded():
    w = dv.to_tensor(np.zeros(3), dtype="float32", stop_gradient=False)
    data = w.numpy()
    w.set_value(np.array([1.0, 2.0, 3.0]))  # float64 into float32, outside no_grad: not an autograd op
    assert w.numpy() is data and w.dtype == np.float32 and w.inplace_version == 1 and w.is_leaf
    np.testing.assert_array_equal(data, [1.0, 2.0, 3.0])
    w.set_value(t64([4.0, 5.0, 6.0]))
    np.testing.assert_array_equal(data, [4.0, 5.0, 6.0])
    with pytest.raises(ValueError, match=r"set_value: .* has shape \[3\], the value \[2\]"):
        w.set_value([1.0, 2.0])
    with pytest.raises(TypeError, match=r"set_value into .* \(int64\)"):
        dv.to_tensor([1, 2]).set_value(np.array([0.5, 1.5]))


def test_cast_changes_the_dtype_of_data_grad_and_accumulation_under_no_grad():
    w = dv.to_tensor(np.array([1.0, 2.0]), dtype="float32", stop_gradient=False)
    (w * 2.0).sum().backward()
    with pytest.raises(RuntimeError, match=r"cast_: .* requires grad; change its dtype under no_grad\(\)"):
        w.cast_("float64")
    with dv.no_grad():
        w.cast_("float64")
    assert w.dtype == np.float64 and w.grad.dtype == np.float64 and w.inplace_version == 1
    (w * dv.to_tensor(np.array([1.0, 1.0]), dtype="float64")).sum().backward()
    assert w.grad.dtype == np.float64
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 3.0])


def test_clip_scale_sqrt_and_clone_out_of_place_match_paddles_gradients():
    check_gradients(lambda x: dv.clip(x, -0.5, 0.5), np.array([-1.0, -0.2, 0.3, 0.9]))
    check_gradients(lambda x: x.scale(2.0, 1.0, bias_after_scale=False), r(2, 2))
    check_gradients(lambda x: x.sqrt(), r(3, low=0.5, high=2.0))
    check_gradients(lambda x: x.clone() * x, r(3))
    x = t64([-1.0, 0.5, 1.0], stop_gradient=False)  # the gradient passes strictly between the bounds
    dv.clip(x, -1.0, 1.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 0.0])


# -- slice assignment: x[index] = value ------------------------------------------------------------------
SETITEM_CASES = {  # name -> (index, value shape or scalar): numpy's rules, which are Paddle's
    "slice": (np.s_[1:3], (2, 4)),
    "negative int": (np.s_[-1], (4,)),
    "negative slice, step": (np.s_[::-2, 1], (2,)),
    "ellipsis": (np.s_[..., -1], (1,)),
    "broadcast row": (np.s_[1:], (4,)),
    "scalar": (np.s_[0, 1:3], 0.75),
    "int array": (np.s_[[0, 2]], (2, 4)),
    "repeated ints": (np.s_[[1, 1, 3]], (3, 4)),
    "mask": (np.s_[np.array([True, False, True, False])], (1, 4)),
    "mixed": (np.s_[[2, 0], 1:3], (2, 2)),
}


@pytest.mark.parametrize("name", sorted(SETITEM_CASES))
def test_slice_assignment_writes_what_numpy_writes_and_bumps_the_version(name):
    index, value = SETITEM_CASES[name]
    a = r(4, 4)
    v = value if isinstance(value, float) else r(*value)
    t = t64(a)
    t[index] = v if isinstance(v, float) else t64(v)
    expected = a.copy()
    expected[index] = v
    np.testing.assert_array_equal(t.numpy(), expected)
    assert t.inplace_version == 1


@pytest.mark.parametrize("name", sorted(SETITEM_CASES))
def test_gradients_through_slice_assignment_match_finite_differences(name):
    index, value = SETITEM_CASES[name]

    def assign(x, v):
        y = x * 1.5
        y[index] = v * 2.0  # the value's gradient lands where it was written, x's where it was not
        return y * y

    check_gradients(assign, r(4, 4), r(*value) if not isinstance(value, float) else np.array(value))


def test_slice_assignment_with_tensor_indices_casts_the_value_to_the_tensors_dtype():
    t = dv.to_tensor(np.zeros((3, 2)), dtype="float32")
    t[dv.to_tensor([2, 0])] = np.array([[1.5, 2.5], [3.5, 4.5]])  # float64 value
    t[dv.to_tensor(np.array([False, True, False]))] = 9
    assert t.dtype == np.float32
    np.testing.assert_array_equal(t.numpy(), [[3.5, 4.5], [9, 9], [1.5, 2.5]])
    ints = dv.to_tensor(np.zeros(3, dtype=np.int64))
    ints[1:] = [2.7, -1.2]  # truncated, as numpy and Paddle cast
    np.testing.assert_array_equal(ints.numpy(), [0, 2, -1])


def test_a_float64_value_assigned_into_float32_gets_its_gradient_in_float64():
    x = dv.to_tensor(np.ones(3), dtype="float32", stop_gradient=False)
    v = t64([2.0], stop_gradient=False)
    y = x * 1.0
    y[1:2] = v
    (y * dv.to_tensor(np.array([1.0, 3.0, 5.0]), dtype="float32")).sum().backward()
    assert v.grad.dtype == np.float64 and x.grad.dtype == np.float32
    np.testing.assert_array_equal(v.grad.numpy(), [3.0])
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 5.0])


def test_slice_assignment_errors_name_the_tensor():
    t = t64(np.zeros((2, 3)))
    with pytest.raises(IndexError, match=r"set_value_ into .* float64 \[2, 3\]: .*out of bounds"):
        t[5] = 1.0
    with pytest.raises(ValueError, match=r"set_value_ into .* float64 \[2, 3\]: .*broadcast"):
        t[0] = np.ones(4)
    w = t64([1.0, 2.0], stop_gradient=False)
    with pytest.raises(RuntimeError, match=r"set_value_: .* is a leaf tensor that requires grad"):
        w[0] = 5.0
    assert t.inplace_version == 0 and w.inplace_version == 0


# -- FLAGS_call_stack_level: the forward stack of the node that failed -------------------------------------
@pytest.fixture
def call_stack_level():
    """Set the flag for one test; it is the process's, so it goes back afterwards."""
    before = dv.get_flags("FLAGS_call_stack_level")
    yield lambda level: dv.set_flags({"FLAGS_call_stack_level": level})
    dv.set_flags(before)


def changed_after_use() -> tuple[dv.Tensor, int]:
    a = t64(np.ones(3), stop_gradient=False)
    b = a * 2.0
    c = b * b  # the node that will fail: its saved b changes below
    line = changed_after_use.__code__.co_firstlineno + 3
    b[0:1] = 5.0
    return c.sum(), line


def test_at_call_stack_level_3_a_backward_error_gives_the_forward_traceback_of_the_node(call_stack_level):
    call_stack_level(3)
    loss, line = changed_after_use()
    with pytest.raises(dv.BackwardError) as failed:
        loss.backward()
    text = str(failed.value)
    head, _, stack = text.partition("\nForward Traceback (most recent call last):\n")
    assert re.search(rf"multiply\d+GradNode\(0x[0-9a-f]+\) \(created at test_inplace.py:{line}\): its input", head)
    assert "version 1, saved at 0" in head
    assert f'test_inplace.py", line {line}, in changed_after_use\n    c = b * b' in stack
    assert "in test_at_call_stack_level_3" in stack, "the whole stack, not the line alone"


def test_below_level_3_a_node_keeps_its_forward_line_only(call_stack_level):
    call_stack_level(1)
    loss, line = changed_after_use()
    with pytest.raises(dv.BackwardError, match=rf"\(created at test_inplace.py:{line}\)") as failed:
        loss.backward()
    assert "Forward Traceback" not in str(failed.value)
    assert loss.grad_fn.edges[0].site.stack is None


def test_set_flags_names_a_paddle_flag_it_ignores_once_and_refuses_what_is_not_a_flag(records):
    dv.set_flags({"FLAGS_cudnn_deterministic": True})
    dv.set_flags({"FLAGS_cudnn_deterministic": False})
    warned = [r["event"] for r in records if "FLAGS_cudnn_deterministic" in str(r["event"])]
    assert len(warned) == 1 and "nothing to act on" in warned[0]
    assert dv.get_flags(["FLAGS_cudnn_deterministic"]) == {"FLAGS_cudnn_deterministic": False}
    with pytest.raises(ValueError, match="'call_stack_level' is not a flag"):
        dv.set_flags({"call_stack_level": 3})
    with pytest.raises(TypeError, match="FLAGS_call_stack_level must be an int"):
        dv.set_flags({"FLAGS_call_stack_level": 3.5})


def test_an_in_place_op_with_its_own_tensor_as_the_operand_saves_the_old_values_once():
    check_gradients(lambda x: (x * 1.0).multiply_(x * 1.0), r(2, 3))
    x = t64([1.0, 2.0, 3.0], stop_gradient=False)
    y = x * 1.0
    y.multiply_(y)  # y * y: both operands are the old y
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])
