"""`Layer` (Paddle's `paddle.nn.Layer`, alias `Module`): parameters and sublayers registered by attribute,
train/eval mode, state dicts, and the deterministic parameter names that logs and `distvlog diff` show.

Names follow Paddle's unique-name scheme: a layer of class `Linear` is `linear_<n>` (a per-process counter
per class), its parameters `linear_<n>.w_0`, `linear_<n>.b_0`. Building the same model on every rank gives
the same names, so one parameter can be followed across per-rank logs.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ..autograd.creation import DEFAULT_DTYPE
from ..autograd.guards import no_grad
from ..autograd.node import next_seq
from ..autograd.tensor import Tensor, tag_leaf


def unique_name(prefix: str) -> str:
    """Paddle's `unique_name.generate`: `prefix_0`, `prefix_1`, ... counted per process (thread-safe)."""
    return f"{prefix}_{next_seq('unique_name:' + prefix) - 1}"


def _snake(name: str) -> str:
    """`Linear` -> `linear`, `MyMLP` -> `my_mlp`, `ReLU` -> `re_lu`, `Conv2D` -> `conv2d` (Paddle's
    camel-to-snake rule: no break after a digit)."""
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


class Parameter(Tensor):
    """A trainable tensor owned by a layer: `stop_gradient=False` and a stable, readable name."""

    __slots__ = ()

    def __init__(self, data: np.ndarray, name: str) -> None:
        super().__init__(data, stop_gradient=False, name=name)
        tag_leaf(self)  # like any leaf created inside a backward_vlog_guard

    def __repr__(self) -> str:
        return f"Parameter {self.name}, {super().__repr__()}"


class Layer:
    """Base class of all layers: subclasses set parameters and sublayers as attributes in `__init__` and
    define `forward`; calling the layer runs `forward`."""

    training: bool

    def __init__(self, name_scope: str | None = None, dtype: Any = None) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_sub_layers", OrderedDict())
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_full_name", unique_name(name_scope or _snake(type(self).__name__)))
        object.__setattr__(self, "_dtype", np.dtype(dtype if dtype is not None else DEFAULT_DTYPE))

    # -- registration ------------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}: call super().__init__() before setting attributes")
        self._parameters.pop(name, None)
        self._sub_layers.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Layer):
            self._sub_layers[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._parameters.pop(name, None)
        self._sub_layers.pop(name, None)
        object.__delattr__(self, name)

    def full_name(self) -> str:
        return self._full_name

    def create_parameter(
        self,
        shape: list[int],
        attr: Callable[[Parameter], None] | None = None,
        dtype: Any = None,
        is_bias: bool = False,
        default_initializer: Callable[[Parameter], None] | None = None,
    ) -> Parameter:
        """A new parameter named `<layer>.w_<k>` (or `.b_<k>` for a bias), filled by `attr` (an initializer,
        Paddle's signature), else `default_initializer`, else as in Paddle: XavierUniform for weights and
        zeros for biases."""
        from .initializer import Constant, XavierUniform

        dtype = np.dtype(dtype) if dtype is not None else self._dtype
        name = unique_name(f"{self._full_name}.{'b' if is_bias else 'w'}")
        param = Parameter(np.zeros([int(s) for s in shape], dtype=dtype), name)
        init = attr or default_initializer or (Constant(0.0) if is_bias else XavierUniform())
        init(param)
        return param

    # -- traversal ---------------------------------------------------------------------------------
    def named_sublayers(self, prefix: str = "", include_self: bool = False) -> Iterator[tuple[str, Layer]]:
        """Every layer below this one (each once), with its dotted path from here."""
        seen: set[int] = set()

        def walk(layer: Layer, path: str) -> Iterator[tuple[str, Layer]]:
            for name, sub in layer._sub_layers.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    sub_path = f"{path}.{name}" if path else name
                    yield sub_path, sub
                    yield from walk(sub, sub_path)

        if include_self:
            seen.add(id(self))
            yield prefix, self
        yield from walk(self, prefix)

    def sublayers(self, include_self: bool = False) -> list[Layer]:
        return [layer for _, layer in self.named_sublayers(include_self=include_self)]

    def named_parameters(self, prefix: str = "", include_sublayers: bool = True) -> Iterator[tuple[str, Parameter]]:
        """(`fc1.weight`, parameter) pairs in registration order; a shared parameter is listed once."""
        layers = self.named_sublayers(prefix, include_self=True) if include_sublayers else [(prefix, self)]
        seen: set[int] = set()
        for path, layer in layers:
            for name, param in layer._parameters.items():
                if id(param) not in seen:
                    seen.add(id(param))
                    yield (f"{path}.{name}" if path else name), param

    def parameters(self, include_sublayers: bool = True) -> list[Parameter]:
        return [p for _, p in self.named_parameters(include_sublayers=include_sublayers)]

    # -- mode, gradients, dtype --------------------------------------------------------------------
    def train(self) -> Layer:
        for layer in self.sublayers(include_self=True):
            object.__setattr__(layer, "training", True)
        return self

    def eval(self) -> Layer:
        for layer in self.sublayers(include_self=True):
            object.__setattr__(layer, "training", False)
        return self

    def clear_gradients(self, set_to_zero: bool = True) -> None:
        for param in self.parameters():
            param.clear_gradient(set_to_zero)

    def to(self, device: Any = None, dtype: Any = None) -> Layer:
        """Cast every parameter to `dtype` (same objects, so optimizers keep them); `device` must be CPU."""
        if device is not None and str(device).lower() not in ("cpu", "place(cpu)"):
            raise ValueError(f"{type(self).__name__}.to: only the CPU is supported, got device {device!r}")
        if dtype is not None:
            for layer in self.sublayers(include_self=True):
                object.__setattr__(layer, "_dtype", np.dtype(dtype))
            with no_grad():
                for param in self.parameters():
                    param.grad = None
                    param.cast_(dtype)
        return self

    # -- state -------------------------------------------------------------------------------------
    def state_dict(self) -> OrderedDict[str, Parameter]:
        """Structured name -> parameter (the live tensors; `.numpy()` them to keep a snapshot)."""
        return OrderedDict(self.named_parameters())

    def set_state_dict(self, state_dict: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        """Load copies of the given values into the parameters; returns (missing keys, unexpected keys).
        A shape mismatch raises before any parameter changes."""
        own = self.state_dict()
        updates = {}
        for key, value in state_dict.items():
            if key in own:
                param = own[key]
                array = np.array(value.numpy() if isinstance(value, Tensor) else value, dtype=param.dtype)
                if array.shape != tuple(param.shape):
                    raise ValueError(
                        f"set_state_dict: {key} ({param.name}) has shape {param.shape}, "
                        f"the state dict gives {list(array.shape)}"
                    )
                updates[key] = array
        for key, array in updates.items():
            own[key].set_value(array)
        return [k for k in own if k not in state_dict], [k for k in state_dict if k not in own]

    # -- calling -----------------------------------------------------------------------------------
    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.forward(*inputs, **kwargs)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, sub in self._sub_layers.items():
            lines.append(f"  ({name}): " + repr(sub).replace("\n", "\n  "))
        return "\n".join(lines) + ("\n)" if len(lines) > 1 else ")")


Module = Layer
