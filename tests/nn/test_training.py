"""End to end: an MLP learns a seeded nonlinear task; the whole model's gradient matches finite differences."""

from __future__ import annotations

import numpy as np

import distvlog as dv
from distvlog import nn
from distvlog.nn import functional as F


def rings(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two concentric noisy rings: not linearly separable, so the hidden layer has to do the work."""
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 2, n)
    radius = np.where(label == 1, 2.0, 1.0) + rng.normal(0, 0.15, n)
    angle = rng.uniform(0, 2 * np.pi, n)
    return np.stack([radius * np.cos(angle), radius * np.sin(angle)], 1).astype(np.float32), label


def test_mlp_reaches_97_percent_on_held_out_rings() -> None:
    dv.seed(0)
    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 2))
    opt = dv.optim.Adam(learning_rate=0.02, parameters=model.parameters())
    x, y = rings(512, seed=1)
    xt, yt = dv.to_tensor(x), dv.to_tensor(y)
    for _ in range(300):
        loss = F.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        opt.clear_grad()
    test_x, test_y = rings(1000, seed=2)
    model.eval()
    with dv.no_grad():
        accuracy = (model(dv.to_tensor(test_x)).numpy().argmax(1) == test_y).mean()
    assert accuracy >= 0.97, f"accuracy {accuracy:.3f}"
    assert loss.item() < 0.1


def test_sgd_with_momentum_trains_a_relu_mlp_too() -> None:
    dv.seed(1)
    model = nn.Sequential(nn.Linear(2, 32, weight_attr=nn.initializer.KaimingUniform()), nn.ReLU(), nn.Linear(32, 2))
    opt = dv.optim.SGD(learning_rate=0.1, parameters=model.parameters(), momentum=0.9)
    x, y = rings(512, seed=3)
    xt, yt = dv.to_tensor(x), dv.to_tensor(y)
    for _ in range(300):
        opt.clear_grad(set_to_zero=False)
        F.cross_entropy(model(xt), yt).backward()
        opt.step()
    assert (model(xt).numpy().argmax(1) == y).mean() >= 0.95


class TwoHeads(nn.Layer):
    """Every layer kind and both losses, so one finite-difference check covers the whole stack."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 6), nn.ReLU(), nn.Dropout(0.3))
        self.classes = nn.Linear(6, 4)
        self.value = nn.Sequential(nn.Linear(6, 1), nn.Sigmoid())

    def forward(self, x: dv.Tensor) -> tuple[dv.Tensor, dv.Tensor]:
        h = self.body(x)
        return self.classes(h), self.value(h)


def test_whole_model_gradient_matches_central_differences_in_float64() -> None:
    dv.seed(2)
    model = TwoHeads().to(dtype="float64")
    rng = np.random.default_rng(5)
    x = dv.to_tensor(rng.standard_normal((8, 5)))
    label, target = dv.to_tensor(rng.integers(0, 4, 8)), dv.to_tensor(rng.uniform(0, 1, (8, 1)))

    def loss() -> dv.Tensor:
        dv.seed(11)  # the same dropout mask on every evaluation
        logits, value = model(x)
        return F.cross_entropy(logits, label) + 0.5 * F.mse_loss(value, target)

    loss().backward()
    params = model.parameters()
    assert len(params) == 8  # four Linear layers
    eps = 1e-6
    for p in params:
        numeric = np.zeros_like(p.numpy())
        for i in np.ndindex(*p.numpy().shape):
            old = p.numpy()[i]
            p.numpy()[i] = old + eps
            up = loss().item()
            p.numpy()[i] = old - eps
            down = loss().item()
            p.numpy()[i] = old
            numeric[i] = (up - down) / (2 * eps)
        assert p.grad.dtype == np.float64
        np.testing.assert_allclose(p.grad.numpy(), numeric, rtol=1e-5, atol=1e-8, err_msg=p.name)
