"""`capture_backward_subgraph_guard` on torch autograd: what a capture does with the nodes a guard gave it.

The guard (in `_guard`) hands over the nodes its thread created inside; each gets a pre-hook (and, when the
gradients are wanted, a hook). The first backward that runs one of them queues the dump for its end, as our
engine writes a capture at the end of the pass: Paddle's files (`backward_graph.dot`,
`ref_forward_graph.dot`, `call_stack.log`, `grad_tensors.log`) through our engine's writer, with torch's
nodes read as ours. The captured nodes that backward ran are grey, the nodes they send gradients to orange
(leaves teal); a node no backward_vlog_guard numbered keeps torch's name. Once per guard; a failure is said
once and never breaks the backward.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..nodelog import Site, backward_files, grad_tensors_text, write_set
from . import _names
from ._nodelog import ACCUMULATE_GRAD, Neighbour, as_array, op_of, report_failure
from ._tag import CAPTURED, tag_of

_current_node = torch._C._current_autograd_node
_graph_task_id = torch._C._current_graph_task_id


class TorchCapture:
    """What one guard captured: its nodes hold it (`node.metadata`, with their forward line). It holds no
    node (a torch node takes no weak reference, and a capture holding its nodes would be a cycle through C++
    that the garbage collector cannot see): the backward that runs them leaves it plain data about them."""

    def __init__(self, path: Path, dump_grads: bool) -> None:
        self.path, self.dump_grads = path, dump_grads
        self.ran: list[_GraphNode] = []  # the captured nodes the pass ran
        self.grads: list[tuple[str, np.ndarray]] = []
        self.task: int | None = None  # the backward pass whose end writes the dump
        self.done = False

    def add(self, created: list, site: Site | None) -> None:
        """The nodes (as `(sequence number, node)`) one call inside the guard created, at the user's line."""
        for _, node in created:
            node.metadata[CAPTURED] = (self, site)
            node.register_prehook(_prehook)
            if self.dump_grads:
                node.register_hook(_posthook)

    def runs(self, fn: Any, site: Site | None, grad_outputs: tuple) -> None:
        task = _graph_task_id()
        if task != self.task:  # the first pass to run them (or the next, when that one failed)
            self.task, self.ran, self.grads = task, [], []
            torch.autograd.Variable._execution_engine.queue_callback(self.finish)
        self.ran.append(_GraphNode.of(fn, site, with_edges=True))
        if self.dump_grads:
            self._keep(Neighbour(fn, 0).out_name, grad_outputs)

    def sent(self, fn: Any, grad_inputs: tuple) -> None:
        for (nxt, nr), g in zip(fn.next_functions, grad_inputs):
            if nxt is not None:
                self._keep(Neighbour(nxt, nr).out_name, (g,))

    def _keep(self, name: str, grads: tuple) -> None:
        g = next((g for g in grads if g is not None), None)
        if g is not None and not self.done:
            self.grads.append((name + "@Grad", np.array(as_array(g))))  # (a copy: torch may reuse the memory)

    def finish(self) -> None:
        """The pass is over: write the dump (torch runs this at the end of the pass)."""
        if self.done:
            return
        self.done = True
        try:
            shown, kind = _joined(self.ran)
            files = backward_files(shown, kind, self.ran)
            if self.dump_grads:
                files["grad_tensors.log"] = grad_tensors_text(self.grads)
            write_set(self.path, files, "captured backward subgraph")
        except Exception as exc:  # the user's backward goes on
            report_failure("backward subgraph capture", exc)
        finally:
            self.ran, self.grads = [], []


def _prehook(grad_outputs: tuple) -> None:
    try:
        fn = _current_node()
        capture, site = fn.metadata[CAPTURED]
        if not capture.done:
            capture.runs(fn, site, grad_outputs)
    except Exception as exc:
        report_failure("capture pre-hook", exc)


def _posthook(grad_inputs: tuple, grad_outputs: tuple) -> None:
    try:
        fn = _current_node()
        capture, _ = fn.metadata[CAPTURED]
        if not capture.done:
            capture.sent(fn, grad_inputs)
    except Exception as exc:
        report_failure("capture hook", exc)


class _GraphNode:
    """A torch node as the graph writer reads a GradNode, as plain data: its address (as the node log prints
    it), name, op and number, forward line; for a captured node, its edges (the nodes it sends to), the
    (shape, dtype) and name of each gradient it sends."""

    __slots__ = ("address", "name", "out_name", "op", "seq", "site", "accumulates", "edges", "in_meta", "inputs")

    @classmethod
    def of(cls, fn: Any, site: Site | None, with_edges: bool = False) -> _GraphNode:
        node = cls()
        me = Neighbour(fn, 0) if fn._input_metadata else None
        tag = tag_of(fn)
        node.address, node.site, node.accumulates = id(fn), site, fn.name() == ACCUMULATE_GRAD
        node.name = me.name if me is not None else fn.name()
        node.out_name = me.out_name if me is not None else "None"
        node.op = op_of(tag.op if tag is not None else _names.paddle_op(fn.name()), (), ())
        node.seq = tag.seq if tag is not None else fn._sequence_nr()
        node.edges, node.in_meta, node.inputs = (), (), ()
        if with_edges:
            sent = [(Neighbour(nxt, nr), nxt) if nxt is not None else (None, None) for nxt, nr in fn.next_functions]
            node.edges = tuple(cls.of(nxt, None) if n is not None else None for n, nxt in sent)
            node.in_meta = tuple((n.out_shape, n.out_dtype) if n is not None else None for n, _ in sent)
            node.inputs = tuple(n.out_name if n is not None else "None" for n, _ in sent)
        return node

    def input_name(self, slot: int) -> str:
        return self.inputs[slot]

    def __repr__(self) -> str:
        return f"{self.name}(0x{self.address:x})"


def _joined(ran: list[_GraphNode]) -> tuple[dict, Any]:
    """The captured nodes and the nodes they send to, by address, their edges pointing at one another."""
    shown = {node.address: node for node in ran}
    for node in ran:
        for nxt in node.edges:
            if nxt is not None:
                shown.setdefault(nxt.address, nxt)
    for node in ran:
        node.edges = tuple(shown[nxt.address] if nxt is not None else None for nxt in node.edges)
    return shown, functools.partial(_kind, {node.address for node in ran})


def _kind(inside: set[int], node: _GraphNode) -> str:
    if node.accumulates:
        return "leaf"
    return "inside" if node.address in inside else "outside"
