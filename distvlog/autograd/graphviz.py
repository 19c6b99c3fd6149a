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
import itertools
import shutil
import subprocess
import time
import traceback
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InputError
from ..logger import IDENTITY, get_logger
from .engine import GraphTask, Observer
from .guards import FORWARD_CAPTURES, Setting
from .node import AccumulationNode, GradNode
from .tensor import Tensor

if TYPE_CHECKING:
    from .opdef import OpDef

_log = get_logger("distvlog.autograd.graphviz")
_dumps = itertools.count(1)
_COLOURS = {"inside": "lightgrey", "outside": "orange", "leaf": "turquoise3"}
_STACK_NOTE = (
    "(each node's forward line only: its whole forward stack is recorded when FLAGS_call_stack_level=3 or "
    "DISTVLOG_CALL_STACK_LEVEL=3 is set before the forward)"
)


def _label(*rows: str) -> str:
    """A quoted DOT label showing `rows` one per line. Backslashes and double quotes are escaped and line
    breaks inside a row become DOT's, so a tensor named `shared "W"` cannot end the string early."""
    lines = [line for row in rows for line in (row.splitlines() or [""])]
    return '"' + "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in lines) + '"'


def _render_svg(dot: Path) -> None:
    """`dot -Tsvg` next to the .dot file. A failure is one warning naming the file (the .dot is still
    there to read), and a partial .svg is removed."""
    svg = dot.with_suffix(".svg")
    try:
        done = subprocess.run(["dot", "-Tsvg", str(dot), "-o", str(svg)], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        problem = str(exc)
    else:
        if done.returncode == 0:
            return
        problem = next((line for line in done.stderr.splitlines() if line.strip()), f"exit status {done.returncode}")
    svg.unlink(missing_ok=True)
    _log.warning(f"could not render {dot} as SVG: dot -Tsvg failed: {problem.strip()}")


def dump_dir(path: str | Path, what: str) -> Path:
    """`path` as a directory to write into, created if missing; one clear line when it cannot be."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{what}: cannot create {path}: {exc.strerror}") from None
    return path


def write_set(path: Path, files: dict[str, str], what: str) -> list[Path]:
    """Write `files` (name -> text) into `path`, each name after a timestamp, a counter and the rank, render
    the .dot files as SVGs when Graphviz is installed, and say where in one record."""
    now = time.time()  # microseconds and a counter: two dumps never share, nor overwrite, a name
    stamp = (
        time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d}"
        f"-{next(_dumps)}-rank{IDENTITY.rank}"
    )
    written = []
    for name, text in files.items():
        target = path / f"{stamp}_{name}"
        with open(target, "x", encoding="utf-8") as f:  # never over another dump; DOT's default charset
            f.write(text)
        written.append(target)
    if shutil.which("dot"):
        for dot in written:
            if dot.suffix == ".dot":
                _render_svg(dot)
    _log.info(f"{what} written to {path}", files=",".join(p.name for p in written))
    return written


def _dims(meta: tuple | None) -> tuple[str, str]:
    if meta is None:
        return "None", "[]"
    shape, dtype = meta
    return str(dtype), str(list(shape))


def _backward_dot(shown: dict[int, GradNode], kind: Callable[[GradNode], str], reverse: bool) -> str:
    lines = [
        f"digraph {'ref_forward_graph' if reverse else 'backward_graph'} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica"];',
    ]
    address = {id(node): nid for nid, node in shown.items()}  # (a view's address is its node's)
    for nid, node in shown.items():
        label = _label(node.name, f"0x{nid:x}")
        lines.append(f'  n{nid:x} [label={label}, fillcolor="{_COLOURS[kind(node)]}"];')
    for nid, node in shown.items():
        for slot, nxt in enumerate(node.edges):
            if nxt is None or id(nxt) not in address:
                continue
            dtype, dims = _dims(node.in_meta[slot])
            if reverse:
                lines.append(f"  n{address[id(nxt)]:x} -> n{nid:x} [label={_label(dtype, dims)}];")
            else:
                label = _label(f"{node.input_name(slot)}@Grad", dtype, dims)
                lines.append(f"  n{nid:x} -> n{address[id(nxt)]:x} [label={label}];")
    return "\n".join(lines + ["}", ""])


def _call_stacks(nodes: Iterable[GradNode]) -> str:
    out, any_stack = [], False
    for node in sorted(nodes, key=lambda n: (n.op.name, n.seq)):
        out.append(f"{node!r}  (forward at {node.site})")
        frames = node.site.frames() if node.site is not None else []
        any_stack = any_stack or bool(frames)
        out.extend("  " + line.rstrip() for line in traceback.format_list(frames))
        out.append("")
    return "\n".join(out if any_stack else [_STACK_NOTE, "", *out])


def backward_files(shown: dict[int, GradNode], kind: Callable[[GradNode], str], ran: Iterable[GradNode]) -> dict:
    """A backward dump's files (name -> text): the nodes `shown` (by address; their edges into `shown` drawn),
    coloured by `kind` ("inside", "outside", "leaf"), and the forward stacks of the nodes that `ran`. Nodes
    are GradNodes or anything read as one (the torch adapter's views)."""
    return {
        "backward_graph.dot": _backward_dot(shown, kind, reverse=False),
        "ref_forward_graph.dot": _backward_dot(shown, kind, reverse=True),
        "call_stack.log": _call_stacks(n for n in ran if not isinstance(n, AccumulationNode)),
    }


def grad_tensors_text(grads: Iterable[tuple[str, np.ndarray]]) -> str:
    """`grad_tensors.log`: each gradient's name, shape, dtype and values."""
    out = []
    for name, g in grads:
        a = np.asarray(g)
        out.append(f"{name}: shape={list(a.shape)} dtype={a.dtype}")
        out.append(np.array2string(a, threshold=10_000, separator=", "))
        out.append("")
    return "\n".join(out)


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
            lines.append(f'  op{i} [label={_label(*rows)}, shape=box, style="rounded,filled", fillcolor="lightgrey"];')
            for key, tensor in inputs:
                label = _label(tensor.name, f"{tensor.dtype}{tensor.shape}")
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
                label = _label(out.name, f"{out.dtype}{out.shape}")
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
