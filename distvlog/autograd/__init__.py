"""Autograd on numpy with Paddle's eager-mode names: Tensor, GradNode, the backward engine, guards."""

from . import engine, graphviz, nodelog
from .creation import full, normal, ones, ones_like, rand, randn, seed, to_tensor, uniform, zeros, zeros_like
from .engine import BackwardError, backward, grad
from .guards import backward_vlog_guard, capture_backward_subgraph_guard, is_grad_enabled, no_grad
from .node import AccumulationNode, GradNode
from .ops import (
    add,
    cast,
    cos,
    divide,
    exp,
    flatten,
    getitem,
    log,
    matmul,
    max,
    mean,
    multiply,
    neg,
    pow,
    reshape,
    sin,
    subtract,
    sum,
    tanh,
    transpose,
)
from .tensor import Tensor

# What watches every backward pass, in this order: the node log, then the subgraph captures.
engine.PASS_OBSERVERS += [nodelog.observe_pass, graphviz.observe_pass]

__all__ = [
    "AccumulationNode",
    "BackwardError",
    "GradNode",
    "Tensor",
    "add",
    "backward",
    "backward_vlog_guard",
    "capture_backward_subgraph_guard",
    "cast",
    "cos",
    "divide",
    "exp",
    "flatten",
    "full",
    "getitem",
    "grad",
    "is_grad_enabled",
    "log",
    "matmul",
    "max",
    "mean",
    "multiply",
    "neg",
    "no_grad",
    "normal",
    "ones",
    "ones_like",
    "pow",
    "rand",
    "randn",
    "reshape",
    "seed",
    "sin",
    "subtract",
    "sum",
    "tanh",
    "to_tensor",
    "transpose",
    "uniform",
    "zeros",
    "zeros_like",
]
