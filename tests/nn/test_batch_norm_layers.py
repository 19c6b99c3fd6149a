"""nn.BatchNorm1D / BatchNorm2D: train and eval, running statistics outside the parameters, Paddle's names and
initialisation, frozen affine parameters, what they refuse."""

from __future__ import annotations

import numpy as np
import pytest

import distvlog as dv
from distvlog import nn
from distvlog.nn import initializer as init


def test_parameters_are_weight_and_bias_and_the_statistics_are_not_among_them():
    """weight ones, bias zeros (trainable); _mean zeros and _variance ones, named as Paddle names them
    (batch_norm2d_<n>.w_1 / .w_2) but not parameters: the optimizer and DataParallel leave them alone."""
    layer = nn.BatchNorm2D(3)
    assert [name for name, _ in layer.named_parameters()] == ["weight", "bias"]
    assert layer.weight.numpy().tolist() == [1, 1, 1] and layer.bias.numpy().tolist() == [0, 0, 0]
    prefix = layer.full_name()
    assert prefix.startswith("batch_norm2d_")
    assert [layer.weight.name, layer.bias.name] == [f"{prefix}.w_0", f"{prefix}.b_0"]
    assert [layer._mean.name, layer._variance.name] == [f"{prefix}.w_1", f"{prefix}.w_2"]
    assert layer._mean.numpy().tolist() == [0, 0, 0] and layer._variance.numpy().tolist() == [1, 1, 1]
    assert layer._mean.stop_gradient and layer._mean.dtype == np.float32


def test_training_uses_batch_statistics_and_updates_the_running_ones_eval_uses_those():
    """train(): batch statistics and an update with the layer's momentum; eval(): the running ones, unchanged."""
    layer = nn.BatchNorm2D(2, momentum=0.5)
    x = dv.to_tensor(np.random.default_rng(0).standard_normal((4, 2, 3, 3)) * 2 + 3, dtype="float32")
    out = layer(x).numpy()
    np.testing.assert_allclose(out.mean(axis=(0, 2, 3)), [0, 0], atol=1e-5)
    batch_mean = x.numpy().mean(axis=(0, 2, 3))
    np.testing.assert_allclose(layer._mean.numpy(), 0.5 * batch_mean, rtol=1e-5)
    layer.eval()
    mean, var = layer._mean.numpy().copy(), layer._variance.numpy().copy()
    expected = (x.numpy() - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5)
    np.testing.assert_allclose(layer(x).numpy(), expected, rtol=1e-5)
    assert layer._mean.numpy().tolist() == mean.tolist()


def test_a_training_step_moves_weight_and_bias_only():
    """The optimizer steps weight and bias; the statistics take no gradient."""
    layer = nn.BatchNorm1D(3)
    opt = dv.optim.SGD(learning_rate=0.5, parameters=layer.parameters())
    x = dv.randn([8, 3])
    (layer(x) * dv.to_tensor(np.arange(3.0), dtype="float32")).sum().backward()
    opt.step()
    assert not np.array_equal(layer.weight.numpy(), [1, 1, 1]) and not np.array_equal(layer.bias.numpy(), [0, 0, 0])
    assert layer._mean.grad is None


def test_attr_false_freezes_weight_at_one_and_bias_at_zero():
    """Paddle's attr=False: a frozen weight of ones and bias of zeros; an initializer still works."""
    layer = nn.BatchNorm1D(2, weight_attr=False, bias_attr=False)
    assert layer.weight.stop_gradient and layer.bias.stop_gradient
    assert layer.weight.numpy().tolist() == [1, 1] and layer.bias.numpy().tolist() == [0, 0]
    assert nn.BatchNorm1D(2, weight_attr=init.Constant(3.0)).weight.numpy().tolist() == [3, 3]


def test_use_global_stats_makes_training_use_the_running_statistics():
    """use_global_stats=True: the running statistics in train mode, not updated."""
    layer = nn.BatchNorm1D(2, use_global_stats=True)
    x = dv.randn([5, 2])
    np.testing.assert_allclose(layer(x).numpy(), x.numpy() / np.sqrt(1 + 1e-5), rtol=1e-6)
    assert layer._mean.numpy().tolist() == [0, 0]


def test_batch_norm_1d_takes_nc_and_ncl_batch_norm_2d_only_nchw():
    """Each class takes its ranks and names the shapes it expects otherwise."""
    assert nn.BatchNorm1D(3)(dv.randn([4, 3])).shape == [4, 3]
    assert nn.BatchNorm1D(3)(dv.randn([4, 3, 5])).shape == [4, 3, 5]
    with pytest.raises(ValueError, match=r"BatchNorm2D: expected input of shape \[N, C, H, W\], got \[4, 3\]"):
        nn.BatchNorm2D(3)(dv.randn([4, 3]))
    with pytest.raises(ValueError, match=r"BatchNorm1D: expected input of shape \[N, C\] or \[N, C, L\]"):
        nn.BatchNorm1D(3)(dv.randn([4, 3, 2, 2]))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: nn.BatchNorm2D(3, data_format="NHWC"), "BatchNorm2D: data_format='NHWC' is not supported"),
        (lambda: nn.BatchNorm1D(3, data_format="NLC"), "BatchNorm1D: data_format='NLC' is not supported"),
        (lambda: nn.BatchNorm2D(3, bias_attr="b"), "BatchNorm2D: bias_attr='b' is not supported"),
    ],
)
def test_unsupported_arguments_are_refused(make, message):
    """Other layouts and ParamAttr-like attrs raise at construction, naming the argument."""
    with pytest.raises(NotImplementedError, match=message):
        make()
