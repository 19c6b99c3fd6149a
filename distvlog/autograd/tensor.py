"""Tensor: a numpy array plus what autograd needs (stop_gradient, grad, the node that produced it)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..nodelog import tensor_name
from .guards import STATE
from .node import AccumulationNode, GradNode, next_seq

_NEW_ACCUMULATION = threading.Lock()


class HookHandle:
    def __init__(self, hooks: list, hook: Callable) -> None:
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


class Tensor:
    """A tensor as in Paddle's eager mode: `stop_gradient` is True unless you say otherwise, and only a
    floating-point tensor may say otherwise."""

    __slots__ = (
        "_data",
        "_stop_gradient",
        "grad",
        "_node",
        "_accum",
        "_name",
        "_vlog_tag",
        "_vc",
        "_base",
        "__weakref__",
    )
    __array_priority__ = 100  # numpy defers `ndarray + Tensor` to Tensor.__radd__

    def __init__(
        self, data: np.ndarray, stop_gradient: bool = True, node: GradNode | None = None, name: str | None = None
    ) -> None:
        self._data = data
        self._name = name
        if not stop_gradient:
            self._check_differentiable()
        self._stop_gradient = stop_gradient
        self.grad: Tensor | None = None
        self._node = node
        self._accum: AccumulationNode | None = None
        self._vlog_tag = None
        self._vc: list[int] | None = None  # the version counter of this tensor's data, made when first needed
        self._base: Tensor | None = None  # the tensor whose data this one views (and whose counter it shares)

    # -- identity ---------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        if self._name is not None:
            return self._name
        if self._node is not None:
            return self._node.out_name
        self._name = f"generated_tensor_{next_seq('generated_tensor') - 1}"
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = value

    @property
    def shape(self) -> list[int]:
        return list(self._data.shape)

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        return self._data.size

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def grad_fn(self) -> GradNode | None:
        return self._node

    def numpy(self) -> np.ndarray:
        return self._data

    def item(self) -> Any:
        return self._data.item()

    def __len__(self) -> int:
        return len(self._data)

    def __float__(self) -> float:
        return float(self._data)

    def __repr__(self) -> str:
        body = np.array2string(np.asarray(self._data), separator=", ", prefix="       ")
        return f"Tensor(shape={self.shape}, dtype={self.dtype}, stop_gradient={self.stop_gradient},\n       {body})"

    # -- autograd ---------------------------------------------------------------------------------
    @property
    def stop_gradient(self) -> bool:
        return self._stop_gradient

    @stop_gradient.setter
    def stop_gradient(self, value: bool) -> None:
        if not value:
            self._check_differentiable()
        self._stop_gradient = value

    def _check_differentiable(self) -> None:
        """Only floating-point tensors take gradients (as in PyTorch): an integer `.grad` would truncate
        every gradient (x * 0.5 gives 0), silently."""
        if self._data.dtype.kind != "f":
            raise TypeError(
                f"only floating-point tensors can have gradients: {self.name} is {self._data.dtype}; "
                f"cast it with .astype('float32') before setting stop_gradient=False"
            )

    def _grad_node(self) -> GradNode:
        """The node a gradient for this tensor flows into: its producer, or the leaf's accumulation."""
        node = self._node
        if node is None:
            node = self._accum
            if node is None:
                with _NEW_ACCUMULATION:  # one node per leaf, also when two threads first use it at once: its
                    if self._accum is None:  # lock serialises their additions into `.grad`
                        self._accum = AccumulationNode(self)
                node = self._accum
        return node

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> HookHandle:
        """Call `hook(grad)` when this tensor's gradient is complete; a returned tensor replaces it."""
        if self.stop_gradient:
            raise RuntimeError(f"cannot register a hook on {self.name}: it has stop_gradient=True")
        node = self._grad_node()
        if node.hooks is None:
            node.hooks = []
        node.hooks.append(hook)
        return HookHandle(node.hooks, hook)

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]) -> HookHandle:
        """Call `hook(self)` each time backward() has accumulated into this leaf's `.grad` (grad() does not:
        it leaves `.grad` alone). DataParallel starts its allreduces from here."""
        if self._node is not None or self.stop_gradient:
            raise RuntimeError(
                f"post-accumulate hooks are for leaf tensors with stop_gradient=False; {self.name} is not one"
            )
        node = self._grad_node()
        if node.post_hooks is None:
            node.post_hooks = []
        node.post_hooks.append(hook)
        return HookHandle(node.post_hooks, hook)

    def detach(self) -> Tensor:
        """The same data without a gradient: a view, so changing either in place changes both."""
        t = Tensor(self._data)
        t._base = self if self._base is None else self._base
        return t

    def clear_gradient(self, set_to_zero: bool = True) -> None:
        if self.grad is not None and set_to_zero:
            self.grad._data = np.zeros_like(self.grad._data)
        else:
            self.grad = None

    clear_grad = clear_gradient

    # -- versions and in-place changes -------------------------------------------------------------
    @property
    def inplace_version(self) -> int:
        """How many times this tensor's data has been changed in place (shared with the tensors viewing the
        same data). A GradNode remembers it for each tensor it saves, and its backward refuses to run once
        it has moved on (PyTorch's version counter; writes through `.numpy()` go unseen)."""
        root = self if self._base is None else self._base
        return 0 if root._vc is None else root._vc[0]

    def _bump_version(self) -> None:
        root = self if self._base is None else self._base
        if root._vc is None:
            root._vc = [1]
        else:
            root._vc[0] += 1

    def set_value(self, value: Any) -> Tensor:
        """Copy `value` (a tensor or array of this tensor's shape) into this tensor's data, cast to its dtype
        (Paddle's `set_value`, for loading weights): not recorded by autograd, but the version goes up."""
        array = value._data if isinstance(value, Tensor) else np.asarray(value)
        if array.shape != self._data.shape:
            raise ValueError(f"set_value: {self.name} has shape {self.shape}, the value {list(array.shape)}")
        try:
            np.copyto(self._data, array, casting="same_kind")
        except (TypeError, ValueError) as exc:  # (numpy's own subclasses take other arguments)
            kind = TypeError if isinstance(exc, TypeError) else ValueError
            raise kind(f"set_value into {self.name} ({self.dtype}): {exc}") from None
        self._bump_version()
        return self

    def cast_(self, dtype: Any) -> Tensor:
        """This tensor's data (and `.grad`) converted to `dtype`, in place of the old (Paddle's `cast_`; what
        `Layer.to` does to parameters, under no_grad). Not recorded: a tensor that requires grad changes
        dtype only under no_grad. Tensors viewing the old data keep it."""
        dtype = np.dtype(dtype)
        if dtype == self._data.dtype:
            return self
        if not self._stop_gradient:
            if STATE.grad_enabled:
                raise RuntimeError(
                    f"cast_: {self.name} requires grad; change its dtype under no_grad(), or use astype() "
                    "for a cast gradients flow through"
                )
            if dtype.kind != "f":
                raise TypeError(f"cast_: {self.name} requires grad, so it must stay floating-point, not {dtype}")
        if self._base is not None:
            raise RuntimeError(f"cast_: {self.name} views the data of {self._base.name}, which keeps its dtype")
        self._data = self._data.astype(dtype)
        if self.grad is not None:
            self.grad = Tensor(self.grad._data.astype(dtype))
        if self._accum is not None:  # its accumulation node fits gradients to the leaf's dtype
            self._accum.out_dtype = dtype
        self._bump_version()
        return self

    # Arithmetic, in-place ops, `astype` and `backward` are bound onto Tensor by the autograd package
    # (ops.TENSOR_METHODS, engine.tensor_backward): the ops and the engine build on Tensor, not the reverse.


def tag_leaf(t: Tensor) -> Tensor:
    """Tag a leaf tensor just made (by a creation API, or a layer's parameter) with this thread's open
    backward_vlog_guard: its accumulation node logs at that level."""
    t._vlog_tag = STATE.vlog_tag
    return t


def leaf(data: np.ndarray, stop_gradient: bool, api: str) -> Tensor:
    """A tensor made by a creation API: named like Paddle and tagged by an open backward_vlog_guard."""
    return tag_leaf(Tensor(data, stop_gradient, name=tensor_name(api, next_seq(api), data.dtype, data.shape)))
