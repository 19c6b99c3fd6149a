"""Layer: registration by attribute, names, modes, state dicts, initializers, the concrete layers."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

import distvlog as dv
from distvlog import nn
from distvlog.nn import functional as F
from distvlog.nn import initializer as init

ROOT = Path(__file__).resolve().parents[2]


class Block(nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.act = nn.Tanh()
        self.scale = self.create_parameter([4], default_initializer=init.Constant(2.0))

    def forward(self, x: dv.Tensor) -> dv.Tensor:
        return self.act(self.fc(x)) * self.scale


def test_linear_uses_paddles_weight_layout_and_computes_x_w_plus_b() -> None:
    layer = nn.Linear(3, 5)
    assert layer.weight.shape == [3, 5] and layer.bias.shape == [5]
    assert not layer.weight.stop_gradient and not layer.bias.stop_gradient
    x = dv.randn([2, 3])
    np.testing.assert_allclose(layer(x).numpy(), x.numpy() @ layer.weight.numpy() + layer.bias.numpy(), rtol=1e-6)
    assert nn.Linear(3, 5, bias_attr=False).bias is None


def test_parameters_registered_by_attribute_in_order_and_shared_ones_once() -> None:
    block = Block()
    names = [name for name, _ in block.named_parameters()]
    assert names == ["scale", "fc.weight", "fc.bias"]
    model = nn.Sequential(block, nn.ReLU(), block)  # the same block twice
    assert len(model.parameters()) == 3
    block.act = None  # replacing a sublayer by a plain value unregisters it
    assert [n for n, _ in block.named_sublayers()] == ["fc"]
    del block.fc
    assert [n for n, _ in block.named_parameters()] == ["scale"]


def test_setting_attributes_before_super_init_is_a_clear_error() -> None:
    class Broken(nn.Layer):
        def __init__(self) -> None:
            self.fc = nn.Linear(2, 2)

    with pytest.raises(RuntimeError, match="super"):
        Broken()


def test_parameter_names_are_paddles_and_the_same_in_every_fresh_process() -> None:
    code = (
        "import distvlog as dv\n"
        "m = dv.nn.Sequential(dv.nn.Linear(4, 8), dv.nn.ReLU(), dv.nn.Linear(8, 2))\n"
        "print(' '.join(p.name for p in m.parameters()))"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
        for _ in range(2)
    ]
    assert runs[0].stdout == runs[1].stdout
    assert runs[0].stdout.split() == ["linear_0.w_0", "linear_0.b_0", "linear_1.w_0", "linear_1.b_0"]


def test_names_count_per_layer_class_within_a_process() -> None:
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    ka, kb = (int(layer.full_name().rsplit("_", 1)[1]) for layer in (a, b))
    assert a.full_name().startswith("linear_") and kb == ka + 1
    assert a.weight.name == f"{a.full_name()}.w_0" and a.bias.name == f"{a.full_name()}.b_0"
    assert Block().full_name().startswith("block_")


def test_train_and_eval_reach_every_sublayer_and_switch_dropout() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    x = dv.ones([64, 4])
    model.eval()
    assert not any(layer.training for layer in model.sublayers(include_self=True))
    np.testing.assert_array_equal(model(x).numpy(), model[0](x).numpy())
    model.train()
    assert all(layer.training for layer in model.sublayers(include_self=True))
    dense, dropped = model[0](x).numpy(), model(x).numpy()
    kept = dropped != 0
    assert 0.3 < kept.mean() < 0.7
    np.testing.assert_allclose(dropped[kept], 2 * dense[kept], rtol=1e-6)  # upscale_in_train: 1 / (1 - p)


def test_dropout_and_linear_take_paddles_positional_arguments() -> None:
    dropout = nn.Dropout(0.25, None, "upscale_in_train", "drop")
    assert dropout.p == 0.25 and dropout.full_name().startswith("drop_")
    linear = nn.Linear(2, 3, init.Constant(1.0), False, "fc")
    assert linear.bias is None and linear.full_name().startswith("fc_")
    np.testing.assert_array_equal(linear.weight.numpy(), np.ones((2, 3), np.float32))


@pytest.mark.parametrize(
    "make, argument",
    [
        (lambda: nn.Dropout(0.5, 1), "axis=1"),
        (lambda: nn.Dropout(0.5, mode="downscale_in_infer"), "mode='downscale_in_infer'"),
        (lambda: nn.Linear(2, 3, "fc.w"), "weight_attr='fc.w'"),  # Paddle's ParamAttr (or its name)
        (lambda: nn.Linear(2, 3, bias_attr="fc.b"), "bias_attr='fc.b'"),
    ],
)
def test_paddle_arguments_not_implemented_raise_naming_the_argument(make, argument) -> None:
    with pytest.raises(NotImplementedError, match=re.escape(argument)):
        make()


def test_state_dict_round_trip_gives_an_identical_model() -> None:
    def mlp() -> nn.Layer:
        return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))

    source, target = mlp(), mlp()
    x = dv.randn([5, 4])
    assert not np.allclose(source(x).numpy(), target(x).numpy())
    state = {k: v.numpy().copy() for k, v in source.state_dict().items()}
    assert list(state) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    missing, unexpected = target.set_state_dict(state)
    assert missing == [] and unexpected == []
    np.testing.assert_array_equal(source(x).numpy(), target(x).numpy())
    state["0.weight"] += 1  # the model holds copies, not the caller's arrays
    np.testing.assert_array_equal(source(x).numpy(), target(x).numpy())
    assert target.set_state_dict({"0.bias": np.zeros(6), "extra": 1}) == (["0.weight", "2.weight", "2.bias"], ["extra"])
    np.testing.assert_array_equal(target[0].bias.numpy(), np.zeros(6, np.float32))


def test_set_state_dict_refuses_a_wrong_shape_and_changes_nothing() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    before = [p.numpy().copy() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"1\.weight .*\[3, 1\].*\[1, 3\]"):
        model.set_state_dict({"0.bias": np.ones(3), "1.weight": np.ones((1, 3))})
    for p, old in zip(model.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), old)


def test_initializers_are_seeded_and_respect_their_bounds() -> None:
    dv.seed(7)
    first = nn.Linear(300, 200).weight.numpy().copy()
    dv.seed(7)
    np.testing.assert_array_equal(nn.Linear(300, 200).weight.numpy(), first)

    xavier = math.sqrt(6 / (300 + 200))
    assert np.abs(first).max() <= xavier and np.abs(first).max() > 0.99 * xavier
    np.testing.assert_allclose(first.var(), xavier**2 / 3, rtol=0.03)  # uniform: variance a^2 / 3
    kaiming = nn.Linear(300, 200, weight_attr=init.KaimingUniform()).weight.numpy()
    limit = math.sqrt(2) * math.sqrt(3 / 300)
    assert np.abs(kaiming).max() <= limit and np.abs(kaiming).max() > 0.99 * limit
    np.testing.assert_array_equal(nn.Linear(3, 4).bias.numpy(), np.zeros(4, np.float32))
    np.testing.assert_array_equal(nn.Linear(3, 4, bias_attr=init.Constant(0.5)).bias.numpy(), np.full(4, 0.5))


def test_sequential_from_named_pairs_indexes_and_iterates() -> None:
    fc, act = nn.Linear(2, 2), nn.Sigmoid()
    for model in (nn.Sequential(("fc", fc), ("act", act)), nn.Sequential(OrderedDict(fc=fc, act=act))):
        assert [n for n, _ in model.named_sublayers()] == ["fc", "act"]
        assert model[1] is act and len(model) == 2 and list(model) == [fc, act]
        x = dv.randn([3, 2])
        np.testing.assert_allclose(model(x).numpy(), F.sigmoid(fc(x)).numpy())
    with pytest.raises(TypeError, match="not a Layer"):
        nn.Sequential(nn.ReLU(), "relu")


def test_activation_layers_match_the_functional_ops() -> None:
    x = dv.randn([4, 3])
    np.testing.assert_array_equal(nn.ReLU()(x).numpy(), F.relu(x).numpy())
    np.testing.assert_array_equal(nn.Tanh()(x).numpy(), dv.tanh(x).numpy())
    np.testing.assert_array_equal(nn.Sigmoid()(x).numpy(), F.sigmoid(x).numpy())


def test_to_float64_keeps_the_parameter_objects_and_their_gradients_follow() -> None:
    model = nn.Linear(3, 2)
    params = model.parameters()
    model(dv.randn([1, 3])).sum().backward()  # the leaves' accumulation nodes exist now, in float32
    model.to(dtype="float64")
    assert model.parameters() == params and all(p.dtype == np.float64 for p in params)
    model(dv.randn([1, 3], dtype="float64")).sum().backward()
    assert all(p.grad.dtype == np.float64 for p in params)
    assert nn.Linear(3, 2).weight.dtype == np.float32
    with pytest.raises(ValueError, match="CPU"):
        model.to("gpu:0")


def test_clear_gradients_and_repr() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.Dropout(0.1))
    model(dv.randn([1, 2])).sum().backward()
    model.clear_gradients(set_to_zero=False)
    assert all(p.grad is None for p in model.parameters())
    assert repr(model) == (
        "Sequential(\n  (0): Linear(in_features=2, out_features=3, dtype=float32)\n  (1): Dropout(p=0.1)\n)"
    )
    assert nn.Module is nn.Layer


@pytest.mark.parametrize(
    "call, named",
    [
        (lambda x: nn.Dropout(axis=0), "Dropout: axis=0"),
        (lambda x: F.dropout(x, axis=0), "dropout: axis=0"),
        (lambda x: nn.Dropout(mode="downscale_in_infer"), "Dropout: mode='downscale_in_infer'"),
        (lambda x: F.cross_entropy(x, dv.to_tensor(np.zeros((2, 3), "int64")), axis=0), "cross_entropy: axis=0"),
        (
            lambda x: F.cross_entropy(x, dv.to_tensor(np.zeros(2, "int64")), label_smoothing=0.1),
            "cross_entropy: label_smoothing=0.1",
        ),
    ],
)
def test_paddle_arguments_we_do_not_implement_are_refused_not_ignored(call, named):
    """An argument away from its default, even a falsy one like axis=0, is an error naming it."""
    with pytest.raises(NotImplementedError, match=re.escape(named)):
        call(dv.to_tensor(np.ones((2, 3), "float32")))


def test_arguments_at_their_defaults_are_accepted():
    x = dv.to_tensor(np.ones((2, 3), "float32"))
    nn.Dropout(axis=None, mode="upscale_in_train")
    F.cross_entropy(x, dv.to_tensor(np.zeros(2, "int64")), axis=1, label_smoothing=0.0)
    dv.optim.Adam(parameters=[dv.to_tensor(np.ones(2, "float32"))], lazy_mode=False)


def test_loading_a_state_dict_changes_the_parameters_in_place_so_an_older_graph_refuses_to_run() -> None:
    model = nn.Linear(3, 2)
    weight = model.weight.numpy()
    loss = model(dv.randn([4, 3])).sum()
    model.set_state_dict({"weight": np.ones((3, 2)), "bias": np.zeros(2)})
    assert model.weight.numpy() is weight and model.weight.inplace_version == 2  # initialised once, then loaded
    with pytest.raises(dv.BackwardError, match=rf"its input {model.weight.name} was changed in place"):
        loss.backward()
