"""A backward graph dump's files, for either engine's nodes (read as `NodeView`s): `backward_graph.dot`,
`ref_forward_graph.dot`, `call_stack.log`, `grad_tensors.log`, written under unique names and rendered as
SVGs when Graphviz's `dot` is installed (see `distvlog.autograd.graphviz` for the guards that write them).
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..logger import IDENTITY, get_logger
from ._view import NodeView

_log = get_logger("distvlog.autograd.graphviz")
_dumps = itertools.count(1)
_COLOURS = {"inside": "lightgrey", "outside": "orange", "leaf": "turquoise3"}
_STACK_NOTE = (
    "(each node's forward line only: its whole forward stack is recorded when FLAGS_call_stack_level=3 or "
    "DISTVLOG_CALL_STACK_LEVEL=3 is set before the forward)"
)


def dot_label(*rows: str) -> str:
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


def _backward_dot(shown: dict[int, NodeView], kind: Callable[[NodeView], str], reverse: bool) -> str:
    lines = [
        f"digraph {'ref_forward_graph' if reverse else 'backward_graph'} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica"];',
    ]
    address = {id(node): nid for nid, node in shown.items()}  # (a view's address is its node's)
    for nid, node in shown.items():
        label = dot_label(node.name, f"0x{nid:x}")
        lines.append(f'  n{nid:x} [label={label}, fillcolor="{_COLOURS[kind(node)]}"];')
    for nid, node in shown.items():
        for slot, nxt in enumerate(node.edges):
            if nxt is None or id(nxt) not in address:
                continue
            dtype, dims = _dims(node.in_meta[slot])
            if reverse:
                lines.append(f"  n{address[id(nxt)]:x} -> n{nid:x} [label={dot_label(dtype, dims)}];")
            else:
                label = dot_label(f"{node.input_name(slot)}@Grad", dtype, dims)
                lines.append(f"  n{nid:x} -> n{address[id(nxt)]:x} [label={label}];")
    return "\n".join(lines + ["}", ""])


def _call_stacks(nodes: Iterable[NodeView]) -> str:
    out, any_stack = [], False
    for node in sorted(nodes, key=lambda n: (n.op.name, n.seq)):
        out.append(f"{node!r}  (forward at {node.site})")
        frames = node.site.frames() if node.site is not None else []
        any_stack = any_stack or bool(frames)
        out.extend("  " + line.rstrip() for line in traceback.format_list(frames))
        out.append("")
    return "\n".join(out if any_stack else [_STACK_NOTE, "", *out])


def backward_files(shown: dict[int, NodeView], kind: Callable[[NodeView], str], ran: Iterable[NodeView]) -> dict:
    """A backward dump's files (name -> text): the nodes `shown` (by address; their edges into `shown` drawn),
    coloured by `kind` ("inside", "outside", "leaf"), and the forward stacks of the nodes that `ran`. Nodes
    are NodeViews or anything read as one (the torch adapter's views)."""
    return {
        "backward_graph.dot": _backward_dot(shown, kind, reverse=False),
        "ref_forward_graph.dot": _backward_dot(shown, kind, reverse=True),
        "call_stack.log": _call_stacks(n for n in ran if not n.accumulates),
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
