"""The model of Paddle's debugging guide (Conv2D, Sigmoid, MaxPool2D, Linear, `feature.reshape([n, -1])`) runs
with only the import changed, logs Paddle's lines for its nodes, and trains; so does a BatchNorm2D variant."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

import distvlog as dv
from distvlog import nn
from distvlog.nn import functional as F

ROOT = Path(__file__).resolve().parents[2]

GUIDE_MODEL = textwrap.dedent("""
    import distvlog as paddle
    import distvlog.nn as nn
    from distvlog import backward_vlog_guard

    class Model(nn.Layer):
        def __init__(self):
            super(Model, self).__init__()
            self.conv = nn.Sequential(
                nn.Conv2D(3, 6, 3, 1), nn.Sigmoid(), nn.MaxPool2D(2, 2),
                nn.Conv2D(6, 16, 3, 1), nn.Sigmoid(), nn.MaxPool2D(2, 2))
            self.fc = nn.Sequential(
                nn.Linear(16*6*6, 120), nn.Sigmoid(), nn.Linear(120, 84),
                nn.Sigmoid(), nn.Linear(84, 10))
        def forward(self, img):
            feature = self.conv(img)
            return self.fc(feature.reshape([img.shape[0], -1]))
""")


def guide_model() -> nn.Layer:
    namespace: dict = {}
    exec(GUIDE_MODEL, namespace)
    return namespace["Model"]()


def test_the_guides_model_runs_forward_and_backward():
    """`y = model(x)` on randn([1, 3, 32, 32]) gives [1, 10]; `y.sum().backward()` fills every parameter's
    gradient, in its shape."""
    model = guide_model()
    x = dv.randn([1, 3, 32, 32])
    y = model(x)
    assert y.shape == [1, 10]
    y.sum().backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert len(grads) == 10 and all(
        g is not None and g.shape == p.shape for g, p in zip(grads.values(), model.parameters())
    )
    assert grads["conv.0.weight"].shape == [6, 3, 3, 3] and np.abs(grads["conv.0.weight"].numpy()).sum() > 0


def test_under_backward_vlog_guard_4_every_node_of_the_model_logs_paddles_lines(tmp_path):
    """Run as a script: the nodes created inside the guard — conv2d, pool2d, sigmoid, the bias adds and
    reshapes, linear — each log `begin run` and their grad API banners, named as Paddle names them; nothing
    else logs at level 4."""
    script = GUIDE_MODEL + textwrap.dedent("""
        model = Model()
        x = paddle.randn([1, 3, 32, 32])
        with backward_vlog_guard(4):
            y = model(x)
        y.sum().backward()
    """)
    env = {**os.environ, "DISTVLOG_LOG_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("DISTVLOG_V", None), env.pop("GLOG_v", None)
    subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True, timeout=120)
    text = (tmp_path / "latest" / "rank-0.log").read_text()
    begun = re.findall(r"\] \[rank 0\] (\w+)GradNode\(0x[0-9a-f]+\) begin run", text)
    assert sorted(begun) == sorted(
        ["conv2d1", "reshape1", "add1", "sigmoid1", "pool2d1", "conv2d2", "reshape2", "add2", "sigmoid2", "pool2d2",
         "reshape3", "linear1", "sigmoid3", "linear2", "sigmoid4", "linear3"]
    )  # fmt: skip
    assert begun[0] == "linear3" and begun.index("conv2d2") < begun.index("conv2d1")  # backward order
    for api in ("conv2d_grad", "pool2d_grad", "sigmoid_grad", "linear_grad"):
        assert f"Running_AD_API_GRAD: {api}=" in text and f"Finish_AD_API_GRAD: {api}=" in text
    assert re.search(r"conv2d2GradNode\(0x[0-9a-f]+\) Found pending node: pool2d1GradNode", text)
    assert "( grad_filter , [{\n        Name: conv2d_0.w_0@Grad" in text
    assert "sum1GradNode" not in text and not re.search(r"GradNodeAccumulation\(0x[0-9a-f]+\) begin run", text)


def _train(model: nn.Layer, steps: int) -> list[float]:
    rng = np.random.default_rng(0)
    x = dv.to_tensor(rng.standard_normal((16, 3, 32, 32)), dtype="float32")
    y = dv.to_tensor(rng.integers(0, 10, 16))
    opt = dv.optim.Adam(learning_rate=0.01, parameters=model.parameters())
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        losses.append(loss.item())
        opt.clear_grad()
        loss.backward()
        opt.step()
    return losses


def test_the_guides_model_fits_a_small_batch():
    """80 Adam steps on 16 random images with random labels bring the loss from ~2.3 to below 0.5."""
    dv.seed(0)
    losses = _train(guide_model(), 80)
    assert 2.0 < losses[0] < 2.6 and losses[-1] < 0.5


def test_a_batch_norm_model_fits_and_then_predicts_in_eval_mode():
    """Conv2D, BatchNorm2D, ReLU, AvgPool2D, SAME padding, MaxPool2D, Flatten: the loss falls below 0.1; in eval
    mode (running statistics) the predictions stay finite and deterministic."""
    dv.seed(0)
    model = nn.Sequential(
        nn.Conv2D(3, 8, 3, padding=1), nn.BatchNorm2D(8), nn.ReLU(), nn.AvgPool2D(2),
        nn.Conv2D(8, 8, 3, stride=2, padding="SAME"), nn.BatchNorm2D(8), nn.ReLU(), nn.MaxPool2D(2),
        nn.Flatten(), nn.Linear(8 * 4 * 4, 10),
    )  # fmt: skip
    losses = _train(model, 40)
    assert losses[-1] < 0.1
    model.eval()
    x = dv.randn([4, 3, 32, 32])
    first, second = model(x).numpy(), model(x).numpy()
    assert np.isfinite(first).all() and np.array_equal(first, second)
