"""Graphs as Graphviz files, and SVGs when Graphviz's `dot` is installed: Paddle's three graph tools.

- `capture_backward_subgraph_guard(dir)`: the GradNodes created inside, written once by the first
  backward that runs them. Colours as in Paddle: nodes created inside the guard grey, their neighbours
  outside it orange, leaf accumulation nodes teal.
- `dump_backward_graph_path=dir` on `Tensor.backward`, `grad` and `autograd.backward`: the whole graph of
  that call (every node it runs grey, leaves teal), written when it is done.
- `capture_fwd_graph_guard(prefix)` (Paddle's later name for `capture_forward_subgraph_guard`): the
  forward ops run inside, boxes named by Paddle's unique API names (`multiply3`), joined by the tensors
  they pass on, labelled with their unique names; ops whose output feeds no loss are there too.

A backward dump is `backward_graph.dot` (edges follow the gradient, labelled with its name, dtype and
dims), `ref_forward_graph.dot` (the same graph with edges reversed, as the forward ran), `call_stack.log`
(each node's forward stack; its forward line only, unless FLAGS_call_stack_level=3 or a capture guard
recorded the stack) and, when asked, `grad_tensors.log`. Every file name starts with a timestamp, a
counter and the rank (`20261130-092530.448562-1-rank0_backward_graph.dot`), so dumps of several calls,
threads and ranks never overwrite one another.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..logger import get_logger
from ..nodelog import backward_files, dot_label, dump_dir, grad_tensors_text, write_set
from .engine import GraphTask, Observer
from .guards import FORWARD_CAPTURES, Setting
from .node import AccumulationNode, GradNode
from .tensor import Tensor

if TYPE_CHECKING:
    from .opdef import OpDef

_log = get_logger("distvlog.autograd.graphviz")


class Capture:
    """The nodes one capture_backward_subgraph_guard captured, and what the next backward did with them."""

    def __init__(self, path: Path, dump_grads: bool) -> None:
        self.path, self.dump_grads = path, dump_grads
        self.nodes: weakref.WeakSet[GradNode] = weakref.WeakSet()
        self.grads: list[tuple[str, np.ndarray]] = []
        self.done = False

    def add(self, node: GradNode) -> None:
        self.nodes.add(node)

    def record(self, node: GradNode, grad: np.ndarray, outputs: tuple) -> None:
        if self.dump_grads and not self.done:
            self.grads.append((node.out_name + "@Grad", grad))
            self.grads += [(node.input_name(i) + "@Grad", g) for i, g in enumerate(outputs) if g is not None]

    def finish(self, graph: Iterable[GradNode]) -> None:
        """Write the dump of the backward pass whose nodes are `graph` (once per guard)."""
        if self.done:
            return
        self.done = True
        files = backward_files(self._shown(graph), self._kind, list(self.nodes))
        if self.dump_grads:
            files["grad_tensors.log"] = grad_tensors_text(self.grads)
        write_set(self.path, files, "captured backward subgraph")

    def _kind(self, node: GradNode) -> str:
        if isinstance(node, AccumulationNode):
            return "leaf"
        return "inside" if node in self.nodes else "outside"

    def _shown(self, graph: Iterable[GradNode]) -> dict[int, GradNode]:
        """The captured nodes and their neighbours outside the guard: the nodes they send gradients to and
        the nodes of this pass that send gradients into them."""
        inside = list(self.nodes)
        shown = {id(n): n for n in inside}
        for node in inside:
            for nxt in node.edges:
                if nxt is not None:
                    shown.setdefault(id(nxt), nxt)
        for node in graph:
            if any(nxt in self.nodes for nxt in node.edges if nxt is not None):
                shown.setdefault(id(node), node)
        return shown


class _Captures(Observer):
    """The captures whose nodes a pass runs: they record the gradients of their own nodes and write their
    dumps once the pass is done. (Observers keep the pass's tables, not the task, which holds them.)"""

    every_node = False  # (a capture's nodes are tagged)

    def __init__(self, task: GraphTask, captures: list[Capture]) -> None:
        self.graph, self.captures = task.dependencies, captures

    def node_finish(self, node: GradNode, grad: np.ndarray, outputs: tuple) -> None:
        if node.capture is not None:
            node.capture.record(node, grad, outputs)

    def pass_end(self) -> None:
        for capture in self.captures:
            capture.finish(self.graph)


def observe_pass(task: GraphTask, tagged: list[GradNode]) -> tuple[Observer, ...]:
    """What this module draws of the pass: its whole graph when the call asked (`dump_backward_graph_path`),
    and its captures, when a node it runs was created inside a capture guard whose dump is not written."""
    observers: tuple[Observer, ...] = () if task.dump_path is None else (BackwardDump(task.dump_path, task),)
    captures = list({id(n.capture): n.capture for n in tagged if n.capture is not None and not n.capture.done}.values())
    return (*observers, _Captures(task, captures)) if captures else observers


class BackwardDump(Observer):
    """`dump_backward_graph_path`: the whole backward graph of one call, written once it has run."""

    every_node = False  # (it reads the pass's graph at its end)

    def __init__(self, path: str | Path, task: GraphTask) -> None:
        self.path = dump_dir(path, "dump_backward_graph_path")  # (before anything runs)
        self.graph, self.stops = task.dependencies, task.stops

    def pass_end(self) -> None:
        ran = [n for n in self.graph if n not in self.stops]
        shown = {id(n): n for n in self.graph}
        kind = {id(n): "leaf" if isinstance(n, AccumulationNode) else "inside" for n in shown.values()}
        write_set(self.path, backward_files(shown, lambda n: kind[id(n)], ran), "backward graph")


class ForwardCapture:
    """The forward ops one capture_fwd_graph_guard saw in its thread, written as a graph when it closes.
    The tensors are held until then (their identity and version key the graph's values)."""

    def __init__(self, prefix: str | Path) -> None:
        raw = str(prefix)
        if raw.endswith(("/", "\\")) or not Path(raw).name:
            self.path, self.name = dump_dir(raw, "capture_fwd_graph_guard"), "forward_graph.dot"
        else:
            self.path = dump_dir(Path(raw).parent, "capture_fwd_graph_guard")
            self.name = Path(raw).name if raw.endswith(".dot") else Path(raw).name + ".dot"
        self.ops: list[tuple[list[str], list[tuple[tuple[int, int], Tensor]], Tensor, tuple[int, int]]] = []

    def record(self, op: OpDef, args: tuple, out: Tensor, inplace: bool = False) -> None:
        """One op call: its unique name (and number operands), its tensor inputs keyed by identity and
        version at the call, its output (in place: the first input, at its next version)."""
        node = out.grad_fn
        api = f"{op.name}{node.seq}" if node is not None and node.op is op else f"{op.name} (no grad)"
        rows, inputs = [api + (" (in place)" if inplace else "")], []
        for slot, a in zip(op.inputs, args):
            if isinstance(a, Tensor):
                version = a.inplace_version - (1 if inplace and a is out else 0)
                inputs.append(((id(a), version), a))
            elif a is not None:
                rows.append(f"{slot}={np.asarray(a).tolist()!r:.40}")
        self.ops.append((rows, inputs, out, (id(out), out.inplace_version)))

    def write(self) -> None:
        """The graph, if any op ran; a file that cannot be written is a warning (the guard may be closing
        on the user's own exception, which must stay the one they see)."""
        try:
            if self.ops:
                write_set(self.path, {self.name: self._dot()}, "forward graph")
        except OSError as exc:
            _log.warning(f"capture_fwd_graph_guard: could not write the forward graph to {self.path}: {exc}")
        finally:
            self.ops.clear()

    def _dot(self) -> str:
        lines = ["digraph forward_graph {", "  rankdir=TB;", '  node [fontname="Helvetica"];']
        produced = {key: i for i, (*_, key) in enumerate(self.ops)}  # the op that made each value (the last)
        consumed, sources = set(), {}
        for i, (rows, inputs, _, _) in enumerate(self.ops):
            lines.append(
                f'  op{i} [label={dot_label(*rows)}, shape=box, style="rounded,filled", fillcolor="lightgrey"];'
            )
            for key, tensor in inputs:
                label = dot_label(tensor.name, f"{tensor.dtype}{tensor.shape}")
                if produced.get(key, i) < i:  # made by an op of the region before this one
                    lines.append(f"  op{produced[key]} -> op{i} [label={label}];")
                    consumed.add(key)
                    continue
                if key not in sources:  # from outside the region: a parameter, the data
                    sources[key] = f"t{len(sources)}"
                    lines.append(f"  {sources[key]} [label={label}, shape=ellipse];")
                lines.append(f"  {sources[key]} -> op{i};")
        for i, (_, _, out, key) in enumerate(self.ops):
            if key not in consumed:  # a result no op of the region used: where the region's values end
                label = dot_label(out.name, f"{out.dtype}{out.shape}")
                lines += [f"  out{i} [label={label}, shape=ellipse, style=dashed];", f"  op{i} -> out{i};"]
        return "\n".join(lines + ["}", ""])


@contextlib.contextmanager
def capture_backward_subgraph_guard(dump_dir_path: str | Path, need_dump_grad_tensors: bool = False) -> Iterator[None]:
    """Capture the GradNodes created inside; the next backward that runs them writes the subgraph to
    `dump_dir_path` (Graphviz files, forward call stacks and, when asked, the gradients)."""
    with Setting(
        "capture", Capture(dump_dir(dump_dir_path, "capture_backward_subgraph_guard"), need_dump_grad_tensors)
    ):
        yield


@contextlib.contextmanager
def capture_fwd_graph_guard(dump_path: str | Path) -> Iterator[None]:
    """Draw the forward ops this thread runs inside, when the guard closes (also after an exception):
    `./debug_info/graph` writes `./debug_info/<timestamp>-<n>-rank<R>_graph.dot` and its SVG."""
    capture = ForwardCapture(dump_path)
    FORWARD_CAPTURES.add(1)
    try:
        with Setting("forward_capture", capture):
            yield
    finally:
        FORWARD_CAPTURES.add(-1)
        capture.write()


capture_forward_subgraph_guard = capture_fwd_graph_guard  # Paddle 3.3's name for it
