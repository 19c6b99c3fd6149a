"""capture_backward_subgraph_guard's output: the captured subgraph as Graphviz, with call stacks and
gradients, written once by the first backward that runs the captured nodes.

Colours as in Paddle: nodes created inside the guard grey, their neighbours outside it orange, leaf
accumulation nodes teal. `backward_graph.dot` follows the gradient; `ref_forward_graph.dot` is the same
graph with edges reversed, as the forward ran.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import time
import traceback
import weakref
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..logger import IDENTITY, get_logger
from .engine import GraphTask, Observer
from .node import AccumulationNode, GradNode

_log = get_logger("distvlog.autograd.graphviz")
_dumps = itertools.count(1)
_COLOURS = {"inside": "lightgrey", "outside": "orange", "leaf": "turquoise3"}


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


def _dims(meta: tuple | None) -> tuple[str, str]:
    if meta is None:
        return "None", "[]"
    shape, dtype = meta
    return str(dtype), str(list(shape))


class Capture:
    """The nodes one guard captured, and what the next backward did with them."""

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
        shown = self._shown(graph)
        now = time.time()  # microseconds and a counter: two captures never share, nor overwrite, a name
        stamp = (
            time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d}"
            f"-{next(_dumps)}-rank{IDENTITY.rank}"
        )
        written = [
            self._write(f"{stamp}_backward_graph.dot", self._dot(shown, reverse=False)),
            self._write(f"{stamp}_ref_forward_graph.dot", self._dot(shown, reverse=True)),
            self._write(f"{stamp}_call_stack.log", self._call_stacks()),
        ]
        if self.dump_grads:
            written.append(self._write(f"{stamp}_grad_tensors.log", self._grad_tensors()))
        if shutil.which("dot"):
            for dot in written[:2]:
                _render_svg(dot)
        _log.info(f"captured backward subgraph written to {self.path}", files=",".join(p.name for p in written))

    def _write(self, name: str, text: str) -> Path:
        target = self.path / name
        with open(target, "x", encoding="utf-8") as f:  # never over another dump; DOT's default charset
            f.write(text)
        return target

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

    def _dot(self, shown: dict[int, GradNode], reverse: bool) -> str:
        lines = [
            f"digraph {'ref_forward_graph' if reverse else 'backward_graph'} {{",
            "  rankdir=TB;",
            '  node [shape=box, style="rounded,filled", fontname="Helvetica"];',
        ]
        for nid, node in shown.items():
            label = _label(node.name, f"0x{nid:x}")
            lines.append(f'  n{nid:x} [label={label}, fillcolor="{_COLOURS[self._kind(node)]}"];')
        for node in shown.values():
            for slot, nxt in enumerate(node.edges):
                if nxt is None or id(nxt) not in shown:
                    continue
                dtype, dims = _dims(node.in_meta[slot])
                if reverse:
                    lines.append(f"  n{id(nxt):x} -> n{id(node):x} [label={_label(dtype, dims)}];")
                else:
                    label = _label(f"{node.input_name(slot)}@Grad", dtype, dims)
                    lines.append(f"  n{id(node):x} -> n{id(nxt):x} [label={label}];")
        return "\n".join(lines + ["}", ""])

    def _call_stacks(self) -> str:
        out = []
        for node in sorted(self.nodes, key=lambda n: n.seq):
            out.append(f"{node!r}  (forward at {node.site})")
            stack = node.site.stack if node.site is not None and node.site.stack else []
            out.extend("  " + line.rstrip() for line in traceback.format_list(stack))
            out.append("")
        return "\n".join(out)

    def _grad_tensors(self) -> str:
        out = []
        for name, g in self.grads:
            a = np.asarray(g)
            out.append(f"{name}: shape={list(a.shape)} dtype={a.dtype}")
            out.append(np.array2string(a, threshold=10_000, separator=", "))
            out.append("")
        return "\n".join(out)


class _Captures(Observer):
    """The captures whose nodes a pass runs: they record the gradients of their own nodes and write their
    dumps once the pass is done."""

    def __init__(self, task: GraphTask, captures: list[Capture]) -> None:
        self.task, self.captures = task, captures

    def node_finish(self, node: GradNode, grad: np.ndarray, outputs: tuple) -> None:
        if node.capture is not None:
            node.capture.record(node, grad, outputs)

    def pass_end(self) -> None:
        for capture in self.captures:
            capture.finish(self.task.dependencies)


def observe_pass(task: GraphTask, tagged: list[GradNode]) -> tuple[Observer, ...]:
    """The pass's captures, when a node it runs was created inside a capture guard whose dump is not written."""
    if not tagged:
        return ()
    captures = list({id(n.capture): n.capture for n in tagged if n.capture is not None and not n.capture.done}.values())
    return (_Captures(task, captures),) if captures else ()
