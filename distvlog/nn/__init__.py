"""`distvlog.nn`: layers, initializers and losses for real training (Paddle's names)."""

from . import functional, initializer
from .activation import ELU, GELU, Hardswish, LeakyReLU, LogSoftmax, ReLU, ReLU6, Sigmoid, Silu, Softmax, Softplus, Tanh
from .conv import Conv2D
from .layer import Layer, Module, Parameter
from .layers import Dropout, Flatten, Linear, Sequential
from .norm import BatchNorm1D, BatchNorm2D
from .pooling import AvgPool2D, MaxPool2D

__all__ = [
    "ELU",
    "GELU",
    "AvgPool2D",
    "BatchNorm1D",
    "BatchNorm2D",
    "Conv2D",
    "Dropout",
    "Flatten",
    "Hardswish",
    "Layer",
    "LeakyReLU",
    "Linear",
    "LogSoftmax",
    "MaxPool2D",
    "Module",
    "Parameter",
    "ReLU",
    "ReLU6",
    "Sequential",
    "Sigmoid",
    "Silu",
    "Softmax",
    "Softplus",
    "Tanh",
    "functional",
    "initializer",
]
