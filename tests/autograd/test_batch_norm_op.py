"""nn.functional.batch_norm: batch vs running statistics, Paddle's running-statistics update, gradients by
finite differences in both modes, dtypes, errors."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradients

import distvlog as dv
from distvlog.nn import functional as F

EPS = 1e-5


def stats(c, dtype="float64"):
    return dv.zeros([c], dtype=dtype), dv.ones([c], dtype=dtype)


def affine(c, seed=0):
    rng = np.random.default_rng(seed)
    return dv.to_tensor(rng.uniform(0.5, 2, c)), dv.to_tensor(rng.standard_normal(c))


def test_training_normalises_each_channel_with_the_batch_statistics():
    """Per channel over N, H, W: (x - mean) / sqrt(biased variance + eps) * weight + bias."""
    x = np.random.default_rng(0).standard_normal((4, 3, 5, 6)) * 3 + 1
    weight, bias = affine(3)
    out = F.batch_norm(dv.to_tensor(x), *stats(3), weight, bias, training=True).numpy()
    mean, var = x.mean(axis=(0, 2, 3), keepdims=True), x.var(axis=(0, 2, 3), keepdims=True)
    expected = (x - mean) / np.sqrt(var + EPS) * weight.numpy()[:, None, None] + bias.numpy()[:, None, None]
    np.testing.assert_allclose(out, expected, rtol=1e-10)


def test_training_updates_the_running_statistics_with_paddles_momentum_and_the_biased_variance():
    """running = momentum * running + (1 - momentum) * batch, twice; each update bumps the tensors' versions."""
    rng = np.random.default_rng(1)
    running_mean, running_var = stats(2)
    expected_mean, expected_var = np.zeros(2), np.ones(2)
    for _ in range(2):
        x = rng.standard_normal((8, 2, 3)) * 2 + 5
        F.batch_norm(dv.to_tensor(x), running_mean, running_var, training=True, momentum=0.8)
        expected_mean = 0.8 * expected_mean + 0.2 * x.mean(axis=(0, 2))
        expected_var = 0.8 * expected_var + 0.2 * x.var(axis=(0, 2))  # ddof=0: Paddle's, not PyTorch's
    np.testing.assert_allclose(running_mean.numpy(), expected_mean, rtol=1e-12)
    np.testing.assert_allclose(running_var.numpy(), expected_var, rtol=1e-12)
    assert running_mean.inplace_version == running_var.inplace_version == 2


def test_eval_uses_the_running_statistics_and_leaves_them_alone():
    """(x - running mean) / sqrt(running variance + eps); no update, no version bump."""
    x = np.random.default_rng(2).standard_normal((3, 2, 4))
    running_mean, running_var = dv.to_tensor(np.array([0.5, -1.0])), dv.to_tensor(np.array([4.0, 0.25]))
    out = F.batch_norm(dv.to_tensor(x), running_mean, running_var, training=False).numpy()
    expected = (x - np.array([0.5, -1.0])[:, None]) / np.sqrt(np.array([4.0, 0.25])[:, None] + EPS)
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    assert running_mean.numpy().tolist() == [0.5, -1.0] and running_var.inplace_version == 0


def test_use_global_stats_overrides_the_mode_as_in_paddle():
    """True: running statistics while training, no update. False: batch statistics (and an update) in eval."""
    x = dv.to_tensor(np.random.default_rng(3).standard_normal((5, 2)) + 3)
    running_mean, running_var = stats(2)
    out = F.batch_norm(x, running_mean, running_var, training=True, use_global_stats=True)
    np.testing.assert_allclose(out.numpy(), x.numpy() / np.sqrt(1 + EPS), rtol=1e-12)
    assert running_mean.numpy().tolist() == [0, 0]
    out = F.batch_norm(x, running_mean, running_var, training=False, use_global_stats=False)
    np.testing.assert_allclose(out.numpy().mean(axis=0), [0, 0], atol=1e-12)
    np.testing.assert_allclose(running_mean.numpy(), 0.1 * x.numpy().mean(axis=0), rtol=1e-12)


@pytest.mark.parametrize("shape", [(6, 3), (4, 2, 5), (3, 2, 4, 3)])
@pytest.mark.parametrize("training", [True, False])
def test_gradients_match_finite_differences(shape, training):
    """For x, weight and bias, through batch statistics (training) and running ones (eval), 2-D to 4-D."""
    rng = np.random.default_rng(4)
    x, weight, bias = rng.standard_normal(shape) * 2 + 1, rng.uniform(0.5, 2, shape[1]), rng.standard_normal(shape[1])
    running_mean, running_var = dv.to_tensor(rng.standard_normal(shape[1])), dv.to_tensor(rng.uniform(0.5, 2, shape[1]))
    check_gradients(
        lambda x, w, b: F.batch_norm(x, running_mean, running_var, w, b, training=training), x, weight, bias
    )


def test_without_weight_and_bias_gradients_still_match():
    """weight=None and bias=None: x's gradient through batch statistics alone."""
    x = np.random.default_rng(5).standard_normal((5, 3, 2))
    check_gradients(lambda x: F.batch_norm(x, *stats(3), training=True), x)


def test_float32_running_statistics_with_float64_input():
    """The normalisation runs in x's dtype; the statistics keep theirs (a model cast to float64 by
    Layer.to leaves them float32)."""
    x = dv.to_tensor(np.random.default_rng(6).standard_normal((4, 2)) + 2)
    running_mean, running_var = stats(2, "float32")
    out = F.batch_norm(x, running_mean, running_var, training=True)
    assert out.dtype == np.float64 and running_mean.dtype == np.float32
    np.testing.assert_allclose(running_mean.numpy(), 0.1 * x.numpy().mean(axis=0), rtol=1e-6)


def test_the_node_is_paddles_batch_norm_with_its_slot_names():
    """batch_norm<n>GradNode with Paddle's slots; the statistics take no gradient."""
    x = dv.randn([4, 2])
    weight, bias = dv.ones([2]), dv.zeros([2])
    weight.stop_gradient = bias.stop_gradient = False
    node = F.batch_norm(x, *stats(2, "float32"), weight, bias, training=True).grad_fn
    assert node.name == f"batch_norm{node.seq}GradNode"
    assert node.op.inputs == ("x", "mean", "variance", "scale", "bias")
    assert [e is not None for e in node.edges] == [False, False, False, True, True]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"data_format": "NHWC"}, NotImplementedError, "batch_norm: data_format='NHWC' is not supported"),
        (
            {"running_mean": dv.zeros([3])},
            ValueError,
            r"running_mean must have shape \[2\] \(x's channels\), got \[3\]",
        ),
        ({"weight": dv.ones([2, 1])}, ValueError, r"weight must have shape \[2\]"),
    ],
)
def test_bad_arguments_raise_one_clear_error(kwargs, error, message):
    """A layout other than NCHW, or a statistic or parameter of the wrong size, is named."""
    args = {"running_mean": dv.zeros([2]), "running_var": dv.ones([2]), **kwargs}
    with pytest.raises(error, match=message):
        F.batch_norm(dv.randn([4, 2, 3, 3]), **args)


def test_a_1d_input_is_refused():
    """An input without a channel axis is refused, naming its shape."""
    with pytest.raises(ValueError, match=r"channel axis \(shape \[N, C, ...\]\), got shape \[4\]"):
        F.batch_norm(dv.randn([4]), dv.zeros([4]), dv.ones([4]))
