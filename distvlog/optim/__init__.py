"""`distvlog.optim`: optimizers with Paddle's constructors (`SGD(learning_rate=..., parameters=...)`)."""

from .adam import Adam
from .optimizer import Optimizer
from .sgd import SGD, Momentum

__all__ = ["SGD", "Adam", "Momentum", "Optimizer"]
