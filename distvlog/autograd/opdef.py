"""An op is a small declarative definition: a name, its input slots, a forward and a backward on numpy
arrays, and what the backward needs saved. `dispatch.apply` turns it into a recorded GradNode."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class OpDef:
    """`forward(*arrays, **attrs) -> out` or `-> (out, aux: dict)` when `aux` names are saved;
    `backward(grad_out, *saved, **attrs) -> tuple of input gradients` (None where there is none).

    `saves` names what backward receives after the gradient, in order: an input slot, `out`,
    `<slot>.shape`, a key of the forward's aux dict, or `needs_grad` (per input, whether its gradient is
    wanted: an op whose input gradients are costly skips those nobody needs and returns None there).

    `inplace(target, *arrays, **attrs)` writes the result into `target`, the first input's array, for the
    op's in-place API (`x.add_(y)`) when no gradient is recorded; without it a ufunc forward writes with
    `out=target`, any other forward's result is copied in.
    """

    name: str
    inputs: tuple[str, ...]
    forward: Callable[..., Any]
    backward: Callable[..., tuple]
    saves: tuple[str, ...] = ()
    aux: tuple[str, ...] = ()  # names the forward returns besides its output
    promote: bool = False  # float32 with float64 promotes to float64 through cast ops
    differentiable: tuple[bool, ...] = field(default=())  # per input; default: all
    inplace: Callable[..., None] | None = None

    def __post_init__(self) -> None:
        if not self.differentiable:
            object.__setattr__(self, "differentiable", (True,) * len(self.inputs))
        known = set(self.inputs) | {"out", "needs_grad"} | {f"{s}.shape" for s in self.inputs} | set(self.aux)
        unknown = [s for s in self.saves if s not in known]
        if unknown:
            raise ValueError(f"op {self.name}: saves {unknown} are not inputs, out, <input>.shape, needs_grad or aux")
        # How to fetch each saved item: ("in", index), ("shape", index), ("out"|"needs_grad", None) or ("aux", key).
        plan = []
        for s in self.saves:
            if s in self.inputs:
                plan.append(("in", self.inputs.index(s)))
            elif s.endswith(".shape"):
                plan.append(("shape", self.inputs.index(s[:-6])))
            elif s in ("out", "needs_grad"):
                plan.append((s, None))
            else:
                plan.append(("aux", s))
        object.__setattr__(self, "save_plan", tuple(plan))
        object.__setattr__(self, "ufunc", isinstance(self.forward, np.ufunc))  # it writes where it is told

    @property
    def grad_name(self) -> str:
        return f"{self.name}_grad"

    def write(self, target: np.ndarray, *arrays: Any, **attrs: Any) -> None:
        """The op's result written into `target` (same_kind casting: float64 into float32, never float into int)."""
        if self.inplace is not None:
            self.inplace(target, *arrays, **attrs)
        elif self.ufunc:
            self.forward(*arrays, out=target, **attrs)
        else:
            result = self.forward(*arrays, **attrs)
            np.copyto(target, result[0] if self.aux else result, casting="same_kind")


def op(
    name: str,
    inputs: str,
    forward: Callable[..., Any],
    backward: Callable[..., tuple],
    *,
    saves: str = "",
    aux: str = "",
    promote: bool = False,
    differentiable: tuple[bool, ...] = (),
    inplace: Callable[..., None] | None = None,
) -> OpDef:
    """Define an op: `op("multiply", "x y", np.multiply, lambda g, x, y: (g * y, g * x), saves="x y")`."""
    return OpDef(
        name,
        tuple(inputs.split()),
        forward,
        backward,
        tuple(saves.split()),
        tuple(aux.split()),
        promote,
        differentiable,
        inplace,
    )


# The one op the dispatcher inserts by itself (dtype promotion), so it is defined below the dispatcher, not in
# the op table it serves.
CAST = op("cast", "x", lambda x, dtype: x.astype(dtype), lambda g, dtype: (g,))
