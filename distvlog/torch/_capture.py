"""`capture_backward_subgraph_guard` on torch autograd: what a capture does with the nodes a guard gave it.

The guard (in `_guard`) hands over the nodes its thread created inside; each gets a pre-hook (and, when the
gradients are wanted, a hook). The first backward that runs one of them queues the dump for its end, as our
engine writes a capture at the end of the pass: Paddle's files (`backward_graph.dot`,
`ref_forward_graph.dot`, `call_stack.log`, `grad_tensors.log`) through our engine's writer, with torch's
nodes read as ours. The captured nodes that backward ran are grey, the nodes they send gradients to orange
(leaves teal); a node no backward_vlog_guard numbered keeps torch's name. Once per guard; a failure is said once and never
breaks the backward.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..autograd.graphviz import backward_files, grad_tensors_text, write_set
from ..autograd.node import Site
from . import _names
from ._nodelog import ACCUMULATE_GRAD, Neighbour, as_array, report_failure
from ._tag import CAPTURED, tag_of

_current_node = torch._C._current_autograd_node
_graph_task_id = torch._C._current_graph_task_id


class Capture:
    """What one guard captured: its nodes hold it (`node.metadata`, with their forward line); it holds the
    nodes only while the backward that runs them does (a torch node takes no weak reference, and a capture
    holding its nodes would be a cycle through C++ that the garbage collector cannot see)."""

    def __init__(self, path: Path, dump_grads: bool) -> None:
        self.path, self.dump_grads = path, dump_grads
        self.ran: list[tuple[Any, Site | None]] = []  # the captured nodes this pass ran, until its end
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
        if self.task is None:
            self.task = _graph_task_id()
            torch.autograd.Variable._execution_engine.queue_callback(self.finish)
        self.ran.append((fn, site))
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
            shown, kind, inside = _views(self.ran)
            files = backward_files(shown, kind, inside)
            if self.dump_grads:
                files["grad_tensors.log"] = grad_tensors_text(self.grads)
            write_set(self.path, files, "captured backward subgraph")
        except Exception as exc:  # the user's backward goes on
            report_failure("backward subgraph capture", exc)
        finally:
            self.ran.clear()


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


class _Op:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class _GraphNode:
    """A torch node as the graph writer reads a GradNode: name, op and number, edges (views of the nodes it
    sends to), the (shape, dtype) of each gradient it sends, the forward line."""

    def __init__(self, fn: Any, site: Site | None) -> None:
        self.fn, self.site = fn, site
        me = Neighbour(fn, 0) if fn._input_metadata else None
        self.name = me.name if me is not None else fn.name()
        self.out_name = me.out_name if me is not None else "None"
        tag = tag_of(fn)
        self.op = _Op(tag.op if tag is not None else _names.paddle_op(fn.name()))
        self.seq = tag.seq if tag is not None else fn._sequence_nr()
        self.edges: tuple = ()
        self.in_meta: tuple = ()
        self.inputs: tuple[str, ...] = ()

    def input_name(self, slot: int) -> str:
        return self.inputs[slot]

    def __repr__(self) -> str:
        return f"{self.name}(0x{id(self.fn):x})"


def _views(captured: list[tuple[Any, Site | None]]) -> tuple[dict, Any, list]:
    """The captured nodes and the nodes they send to, as views joined by their edges."""
    views: dict[int, _GraphNode] = {}

    def view(fn: Any, site: Site | None = None) -> _GraphNode:
        v = views.get(id(fn))
        if v is None:
            v = views[id(fn)] = _GraphNode(fn, site)
        return v

    inside = [view(fn, site) for fn, site in captured]
    for v in inside:
        edges, meta, names = [], [], []
        for nxt, nr in v.fn.next_functions:
            n = Neighbour(nxt, nr) if nxt is not None else None
            edges.append(view(nxt) if n is not None else None)
            meta.append((n.out_shape, n.out_dtype) if n is not None else None)
            names.append(n.out_name if n is not None else "None")
        v.edges, v.in_meta, v.inputs = tuple(edges), tuple(meta), tuple(names)
    shown = {id(v.fn): v for v in views.values()}  # (by the node's address, as the node log prints it)
    return shown, functools.partial(_kind, {id(v) for v in inside}), inside


def _kind(inside: set[int], v: _GraphNode) -> str:
    if v.fn.name() == ACCUMULATE_GRAD:
        return "leaf"
    return "inside" if id(v) in inside else "outside"
