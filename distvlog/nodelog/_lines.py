"""What a node prints while backward runs it, at exactly its level, in Paddle's order:

  4  <node>(0x..) begin run
  3  ===Running_AD_API_GRAD: <op>_grad===, then the Input dump
  3  ===Running_C++_API: <op>_grad<n>===
  4  kernel key and kernel signature (ours: numpy, dtypes, shapes)
  3  ===Finish_C++_API: <op>_grad<n>===, then the Input + Output dump
  5  one `grad_stats` record per gradient: shape, dtype, L2 norm, NaN/Inf counts (what `diff` reads);
     at 6 also min, max, mean and checksum (four more passes over every gradient)
  3  ===Finish_AD_API_GRAD: <op>_grad===
  4  <node>(0x..) Found pending node: <next>(0x..), per out-edge that received a gradient (in the finish's
     batch, read from the pass once the engine has handed the outputs on)

Tensor dumps grow with the level as Paddle's: 3 names, 4 + pointers, 5 + TensorInfo, 6 + ADInfo,
11 + values (truncated). The statistics are in the `grad_stats` records, whose fields `diff` reads.

`NodeLog` reads a node only as a `NodeView` (name, seq, op's grad_name, inputs and saves, edges, saved,
attrs, site, backend and the tensor names) with gradients as numpy arrays: a GradNode is one, and the
PyTorch adapter (`distvlog.torch`) shows torch's nodes as one, so both print through this class.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..checksum import checksum
from ..format import BANNER_EDGE as _BANNER
from ..format import (
    BEGIN_RUN,
    FINISH_AD_API,
    FINISH_CPP_API,
    FOUND_PENDING,
    GRAD_STATS,
    RUNNING_AD_API,
    RUNNING_CPP_API,
    FieldsKind,
)
from ..logger import SINK, LineWriter, get_logger
from ._view import NOT_READ, NodeView, dtype_name, shape_list, shape_text

ENGINE = "distvlog.autograd.engine"  # the module the backward's records belong to (`engine=5` in vmodule)
_log = get_logger(ENGINE)
MAX_VALUES = 24  # elements printed per tensor at level >= 11


_STATS = {"shape": str, "dtype": str, "norm": float, "nan": int, "inf": int}  # at level 5
_DETAIL = {"min": float, "max": float, "mean": float, "checksum": str}  # and at 6
_LEAN = len(_STATS)


def grad_stats(a: np.ndarray, detail: bool = True) -> dict[str, Any]:
    """Statistics that tell ranks apart, robust to NaN/Inf: the L2 norm and NaN/Inf counts in one pass over a
    finite gradient; with `detail`, min, max, mean and a checksum (exact to compare) in four more."""
    return dict(zip([*_STATS, *_DETAIL], _stats_values(a, detail)))


def _stats_values(a: np.ndarray, detail: bool) -> tuple:
    """grad_stats' values, in its order and of its fields' types."""
    # The checksum reads C order: with it, one contiguous copy serves both; without it, the statistics read
    # the elements in memory order (a transposed weight gradient, as torch's addmm gives, is not copied).
    a = np.ascontiguousarray(a) if detail else np.asarray(a)
    dtype = a.dtype
    wide = dtype.kind == "f" and dtype.itemsize >= 4  # BLAS's; float16 and ints in float64 (no overflow)
    flat = a.ravel(order="K") if wide else a.ravel(order="K").astype(np.float64)
    norm = math.sqrt(float(flat.dot(flat))) if flat.size else 0.0  # (float32 sums in float32: ~1e-4 off
    n_nan = n_inf = 0  # at 10M elements)
    if not math.isfinite(norm):  # a NaN or Inf, or squares beyond the dtype's range
        finite = np.isfinite(flat)
        n_nan = int(np.count_nonzero(np.isnan(flat)))
        n_inf = flat.size - int(np.count_nonzero(finite)) - n_nan
        flat = flat[finite] if n_nan or n_inf else flat
        largest = float(np.max(np.abs(flat))) if flat.size else 0.0
        scaled = flat / largest if largest else flat
        norm = largest * math.sqrt(float(scaled.dot(scaled))) if largest else 0.0
    stats = (shape_text(a.shape), dtype_name(dtype), norm, n_nan, n_inf)
    if not detail:
        return stats
    if flat.size == 0:
        return (*stats, math.nan, math.nan, math.nan, checksum(a))
    return (
        *stats,
        float(np.minimum.reduce(flat)),
        float(np.maximum.reduce(flat)),
        float(np.add.reduce(flat, dtype=np.float64)) / flat.size,
        checksum(a),
    )


# A grad_stats record's fields: the slot, the tensor, the forward line when known, then the statistics.
_RECORD_FIELDS = {
    (site, detail): FieldsKind(
        {"slot": str, "tensor": str, **({"site": str} if site else {}), **_STATS, **(_DETAIL if detail else {})}
    )
    for site in (False, True)
    for detail in (False, True)
}


def _values(a: np.ndarray) -> str:
    """A tensor's values, all of them up to MAX_VALUES; beyond, the first and last MAX_VALUES/2 in C order
    (numpy's own summary keeps 6 per dimension: 6^ndim values)."""
    if a.size <= MAX_VALUES:
        return np.array2string(a, separator=", ")
    flat = np.array2string(a.reshape(-1), threshold=MAX_VALUES, edgeitems=MAX_VALUES // 2, separator=", ")
    return f"{flat} ({a.size} values, shape {list(a.shape)})"


class NodeLog:
    """The log of one node run; created by the engine only when the node's level is 3 or more."""

    __slots__ = ("node", "level", "log", "api", "label", "accumulates", "backend", "_stats", "_inputs_text")

    def __init__(self, node: NodeView, level: int, pass_id: int, stats: dict[int, tuple], **fields: Any) -> None:
        self.node, self.level = node, level
        self.log = LineWriter(_log, level, node=node.name, **{"pass": pass_id}, **fields)
        self.accumulates = node.accumulates
        self.backend = node.backend
        self.api = node.name if self.accumulates else node.op.grad_name
        self.label = repr(node) if level >= 4 else ""  # (the lines naming the node are level 4's)
        self._stats = stats  # the pass's: id(gradient) -> (gradient, its grad_stats), from producer to consumer
        self._inputs_text = ""

    def stats(self, grad: np.ndarray) -> tuple:
        """grad_stats' values of a gradient at this node's level, computed once per pass."""
        held = self._stats.get(id(grad))
        detail = self.level >= 6
        if held is None or detail and len(held[1]) == _LEAN:  # (the pass holds the array: its id is not
            held = self._stats[id(grad)] = (grad, _stats_values(grad, detail))  # reused meanwhile)
        return held[1] if detail else held[1][:_LEAN]

    def _tensor(self, name: str, a: np.ndarray, grad_node: NodeView | None) -> str:
        level = self.level
        if level < 4:
            return f"[{{\n        Name: {name} }}]"
        # Paddle's Tensor_Impl_Ptr is the object holding the memory: ours is the array that owns the buffer
        # (views of one buffer print the same), not its data address (`__array_interface__` costs ~20x more)
        base = getattr(a, "base", None)
        text = (
            f"[{{\n        Name: {name},\n        Initialized: 1,\n        Tensor_Ptr:0x{id(a):x},\n"
            f"        Tensor_Impl_Ptr: 0x{id(a if base is None else base):x}"
        )
        if level >= 5:
            text += (
                f",\n        TensorInfo: {{ Type: DenseTensor, Dtype: {dtype_name(a.dtype)}, Place: CPU, "
                f"Shape: {shape_list(a.shape)} }}"
            )
        if level >= 6:
            text += f",\n        ADInfo: {{ {'None' if grad_node is None else f'NodeView: {grad_node!r}'} }}"
        if level >= 11:
            text += f",\n        Value: {_values(np.asarray(a))}"
        return text + " }]"

    def _inputs(self, grad: np.ndarray) -> str:
        """The Input dump: the incoming gradient and the saved tensors (the same at begin and finish)."""
        if not self._inputs_text:
            node = self.node
            parts = [f"( grad_out , {self._tensor(node.out_name + '@Grad', grad, node)})"]
            for what, value in zip(node.op.saves, node.saved or ()):
                if isinstance(value, np.ndarray):
                    slot = node.op.inputs.index(what) if what in node.op.inputs else None
                    name = node.input_name(slot) if slot is not None else "None"
                    parts.append(f"( {what} , {self._tensor(name, value, None)})")
                elif value is NOT_READ:
                    parts.append(f"( {what} , [ not read: packed by a saved_tensors_hooks hook ])")
            self._inputs_text = "[ \n" + ",  \n".join(parts) + ", ]"
        return self._inputs_text

    def begin(self, grad: np.ndarray) -> None:
        with SINK.signals_held:  # (a signal meanwhile waits for these lines)
            node, api, level = self.node, self.api, self.level
            records: list[tuple[int, str, None]] = []  # (only the texts of the node's levels are built)
            if level >= 4:
                records.append((4, f"{self.label} {BEGIN_RUN}", None))
            if level >= 5:
                edges = len(node.edges) - node.edges.count(None)
                records.append((5, f"{self.label} has {edges} out edges to run", None))
            records += [
                (3, f"{_BANNER}{RUNNING_AD_API}: {api}{_BANNER}", None),
                (3, f"{{ Input: {self._inputs(grad)}}} ", None),
            ]
            if not self.accumulates:
                records.append((3, f"{_BANNER}{RUNNING_CPP_API}: {api}{node.seq}{_BANNER}", None))
                if level >= 4:
                    records += [
                        (4, f"{api} API kernel key: [{self.backend}, CPU, {dtype_name(grad.dtype)}]", None),
                        (4, self._kernel(grad), None),
                    ]
                if level >= 7:
                    records.append((7, "Run Backward Kernel", None))
            self.log.lines(records)

    def _kernel(self, grad: np.ndarray) -> str:
        node, api = self.node, self.api
        ins = [grad] + [v for v in node.saved or () if isinstance(v, np.ndarray)]
        outs = [meta for meta in node.in_meta if meta is not None]
        sig = ",\n".join(
            [
                f"        backend: {self.backend},  dtype: {dtype_name(a.dtype)},  shape: {shape_list(a.shape)}"
                for a in ins
            ]
        )
        osig = ",\n".join(
            [f"        backend: {self.backend},  dtype: {dtype_name(d)},  shape: {shape_list(s)}" for s, d in outs]
        )
        attrs = ",\n".join(f'        "{k}"' for k in node.attrs)
        return f'{api} kernel: {{"input":[\n{sig}\n],\n"output":[\n{osig}\n],\n"attribute":[\n{attrs}\n]}}'

    def finish(
        self, grad: np.ndarray, outputs: tuple, deps: Mapping[NodeView, int | None], held: list[bool] | None
    ) -> None:
        """The node's outputs, then per out-edge that received a gradient (at level 4 and up, read from the
        pass's in-degrees `deps` after the hand-off): the next node, the in-degree it has left and — at 6
        and up — the gradient and whether it was summed into one already held there (`held`: per edge,
        whether the next node held a gradient before this node ran)."""
        with SINK.signals_held:  # (a signal meanwhile waits for these lines)
            node, api, level = self.node, self.api, self.level
            grads = [
                (i, f"grad_{slot}", node.input_name(i) + "@Grad", g)
                for i, (slot, g) in enumerate(zip(node.op.inputs, outputs))
                if g is not None
            ]
            outs = [f" ( {slot} , {self._tensor(name, g, node.edges[i])})" for i, slot, name, g in grads]
            records: list[tuple[int, str, dict[str, Any] | None]] = []
            if not self.accumulates:
                records.append((3, f"{_BANNER}{FINISH_CPP_API}: {api}{node.seq}{_BANNER}", None))
            dump = f"{{ Input: {self._inputs(grad)},  \n Output: [ \n" + ",  \n".join(outs) + ", ] } "
            records.append((3, dump, None))
            if level >= 5:
                fields = _RECORD_FIELDS[node.site is not None, level >= 6]
                site = () if node.site is None else (str(node.site),)  # `diff` names the forward line
                records.append((5, GRAD_STATS, fields("grad_out", node.out_name + "@Grad", *site, *self.stats(grad))))
                records += [(5, GRAD_STATS, fields(slot, name, *site, *self.stats(g))) for _, slot, name, g in grads]
                if all(g is not grad for *_, g in grads):
                    del self._stats[id(grad)]  # arrived, not passed on: the pass need not hold this gradient any more
            records.append((3, f"{_BANNER}{FINISH_AD_API}: {api}{_BANNER}", None))
            if level >= 4:
                for nxt, g, summed, in_degree in _pending(node, outputs, deps, held):
                    if level >= 6:
                        records += [
                            (
                                6,
                                f"{self.label} Add grad_output_tensor to {nxt!r}: dtype={dtype_name(g.dtype)}, "
                                f"dims={shape_list(g.shape)}",
                                None,
                            ),
                            (7, f"{'Sum' if summed else 'Move'} grad inputs for {nxt!r}", None),
                        ]
                    extra = None if in_degree is None else {"in_degree": in_degree}
                    records.append((4, f"{self.label} {FOUND_PENDING}: {nxt!r}", extra))
            self.log.lines(records)


def _pending(
    node: NodeView, outputs: tuple, deps: Mapping[NodeView, int | None], held: list[bool] | None
) -> list[tuple[NodeView, np.ndarray, bool, int | None]]:
    """Per out-edge of `node` that sent a gradient into the pass, in edge order: (next node, gradient,
    whether it was added to one already there, the next node's in-degree left just after this edge, None
    where the engine does not say: torch's).

    Read after the hand-off, so an edge to a node that later edges of `node` also reach counts those
    later edges back in; an edge was summed if the node held a gradient before (`held`, when known) or an
    earlier edge of `node` sent it one."""
    later: dict[NodeView, int] = {}  # edges still to come after the one at hand, per next node
    out = []
    for i in range(len(outputs) - 1, -1, -1):
        nxt = node.edges[i]
        if nxt is None or nxt not in deps:
            continue
        g = outputs[i]
        if g is not None:
            earlier = any(node.edges[j] is nxt and outputs[j] is not None for j in range(i))
            summed = earlier or (held is not None and held[i])
            left = deps[nxt]
            out.append((nxt, g, summed, None if left is None else left + later.get(nxt, 0)))
        later[nxt] = later.get(nxt, 0) + 1
    out.reverse()
    return out
