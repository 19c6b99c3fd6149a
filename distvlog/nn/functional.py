"""`distvlog.nn.functional`: activations and losses, as `paddle.nn.functional`."""

from ..autograd.ops import cross_entropy, dropout, linear, log_softmax, mse_loss, relu, sigmoid, softmax, tanh

__all__ = ["cross_entropy", "dropout", "linear", "log_softmax", "mse_loss", "relu", "sigmoid", "softmax", "tanh"]
