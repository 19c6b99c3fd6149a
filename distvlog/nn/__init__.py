"""`distvlog.nn`: layers, initializers and losses for real training (Paddle's names)."""

from . import functional, initializer
from .layer import Layer, Module, Parameter
from .layers import Dropout, Linear, ReLU, Sequential, Sigmoid, Tanh

__all__ = [
    "Dropout",
    "Layer",
    "Linear",
    "Module",
    "Parameter",
    "ReLU",
    "Sequential",
    "Sigmoid",
    "Tanh",
    "functional",
    "initializer",
]
