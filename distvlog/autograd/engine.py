"""The backward engine.

Roles as in PyTorch's engine: a `GraphTask` is one backward pass (the in-degree of every node it will
visit — for `grad()` only those between the outputs and the inputs —, a holder per node where arriving
gradients are summed, what `grad()` captures and the inputs it stops at); the ready queue holds nodes
whose gradient is complete; `_run_node` executes one node and `_validate` checks its outputs in one
place — the gradient for each input is summed back to the input's shape (undoing broadcasting) and cast
to its dtype there, so no op has to. Gradient arrays are values: nothing here modifies one in place.

The loop schedules and nothing else. What else happens during a pass — the node log, the subgraph
capture, a graph dump — is done by the pass's `Observer`s, which see each node begin and finish. Each
factory in `PASS_OBSERVERS` is asked once per pass, with the nodes of the pass that carry a guard's tag,
which observers the pass needs; a pass without any runs the loop as if observers did not exist.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..errors import refuse_unsupported
from ..logger import flush
from .node import AccumulationNode, GradNode
from .tensor import Tensor

_passes = itertools.count(1)
_running = threading.local()  # the GraphTasks this thread is executing, innermost last (hooks may nest)


class BackwardError(RuntimeError):
    """A node failed during backward; the message names the node and the forward line that created it,
    then gives the forward stack that created it when one was recorded (FLAGS_call_stack_level=3)."""

    def __init__(self, node: GradNode, what: str) -> None:
        site = node.site
        where = f" (created at {site})" if site is not None else ""
        stack = site.forward_traceback() if site is not None else ""
        super().__init__(f"{node!r}{where}: {what}" + (f"\n{stack}" if stack else ""))
        self.node = node


class Observer:
    """Sees one backward pass run (PyTorch's hooks, for the pass as a whole). Every method does nothing
    unless overridden; an observer must not change what it is shown.

    `node_finish` is called once the loop has handed the node's outputs on: the task's `holders` and
    `dependencies` then show, for each next node, the gradient it holds and its in-degree left.

    `every_node` False says the observer needs only the pass's tagged nodes (a vlog tag or a capture): while
    no observer of the pass needs every node, the loop shows them no other (a guard on one layer of a deep
    model then costs the other nodes one attribute read each)."""

    every_node = True

    def pass_begin(self) -> None:
        """Before the first node runs."""

    def node_begin(self, node: GradNode, grad: np.ndarray) -> None:
        """`node` is about to run with its complete incoming gradient `grad`."""

    def node_finish(self, node: GradNode, grad: np.ndarray, outputs: tuple) -> None:
        """`node` ran: `outputs` are its gradients per out-edge (None where it sends none)."""

    def pass_end(self) -> None:
        """Every node ran and the pass's callbacks returned (not called when the pass failed)."""


ObserverFactory = Callable[["GraphTask", list[GradNode]], Sequence[Observer]]
# Asked at the start of every pass, in order, with the pass's tagged nodes (a vlog tag or a capture).
PASS_OBSERVERS: list[ObserverFactory] = []


class GraphTask:
    """The state of one backward pass."""

    __slots__ = (
        "dependencies",
        "stops",
        "holders",
        "retain_graph",
        "accumulate",
        "captured",
        "pass_id",
        "observers",
        "every_node",
        "callbacks",
        "dump_path",
    )

    def __init__(
        self,
        roots: dict[GradNode, np.ndarray],
        retain_graph: bool,
        captured: dict[GradNode, np.ndarray | None] | None = None,
        dump_path: str | Path | None = None,
    ) -> None:
        self.holders = dict(roots)
        self.dump_path = dump_path  # `dump_backward_graph_path`: drawn by an observer (graphviz), not here
        self.retain_graph = retain_graph
        self.accumulate = captured is None  # grad() leaves `.grad` alone
        self.captured = captured or {}
        self.dependencies, self.stops, tagged = _graph(list(roots), None if captured is None else set(captured))
        self.pass_id = next(_passes)
        self.callbacks: list[Callable[[], None]] = []
        chosen: list[Observer] = []
        for factory in PASS_OBSERVERS:
            chosen += factory(self, tagged)
        self.observers = tuple(chosen)
        self.every_node = any(observer.every_node for observer in chosen)


def _graph(
    roots: list[GradNode], targets: set[GradNode] | None
) -> tuple[dict[GradNode, int], frozenset[GradNode], list[GradNode]]:
    """The nodes the pass visits with their in-degrees, those of them it captures without running, and
    those it runs that carry a guard's tag (what the observer factories look at).

    backward() runs every node reachable from the roots: each leads to a leaf's `.grad`. grad() runs only
    the nodes through which one of its inputs is reached (PyTorch's exec_info), and stops at an input whose
    node leads to no other input: the gradient arriving there is the answer, running the node would only
    throw its result away (and release its saved tensors). Saved tensors an earlier backward released, or
    leaves changed in place since the forward saved them, are refused here: before anything runs, and only
    where this pass needs them."""
    deps = _reachable(roots)
    stops: frozenset[GradNode] = frozenset()
    if targets is not None:
        deps, stops = _prune(deps, targets)
    tagged = []
    for node in deps:
        if node in stops:
            continue
        if node.saved is None:
            raise BackwardError(
                node,
                "its saved tensors were released by an earlier backward; pass "
                "retain_graph=True to that backward to run through the graph again",
            )
        for counter, version, _ in node.versions:
            if counter[0] != version:
                raise BackwardError(node, node.changed_input())
        if node.tagged:
            tagged.append(node)
    return deps, stops, tagged


def _reachable(roots: list[GradNode]) -> dict[GradNode, int]:
    """In-degree of every node reachable from the roots."""
    deps, stack = dict.fromkeys(roots, 0), list(roots)
    while stack:  # one walk counts the in-degrees as it discovers the nodes
        for nxt in stack.pop().edges:
            if nxt is None:
                continue
            if nxt in deps:
                deps[nxt] += 1
            else:
                deps[nxt] = 1
                stack.append(nxt)
    return deps


def _prune(deps: dict[GradNode, int], targets: set[GradNode]) -> tuple[dict[GradNode, int], frozenset[GradNode]]:
    """grad(): keep the reached targets and the nodes from which one can be reached; a target that leads to no
    other is a stop. An accumulation node is none: it has nowhere to send a gradient, and running it under
    grad() only logs the gradient its leaf receives."""
    needed: set[GradNode] = set()
    for node in reversed(_topological(deps)):
        if any(nxt in needed or nxt in targets for nxt in node.edges):
            needed.add(node)
    reached = targets & deps.keys()
    stops = frozenset(node for node in reached - needed if type(node) is not AccumulationNode)
    return _in_degrees(needed | reached), stops


def _in_degrees(nodes: set[GradNode]) -> dict[GradNode, int]:
    deps = dict.fromkeys(nodes, 0)
    for node in nodes:
        for nxt in node.edges:
            if nxt in deps:
                deps[nxt] += 1
    return deps


def _topological(deps: dict[GradNode, int]) -> list[GradNode]:
    remaining = dict(deps)
    order = [node for node, n in remaining.items() if n == 0]
    for node in order:  # grows while iterating: Kahn's algorithm
        for nxt in node.edges:
            if nxt in remaining:
                remaining[nxt] -= 1
                if remaining[nxt] == 0:
                    order.append(nxt)
    return order


def _sum_to(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """Undo broadcasting: sum `grad` down to `shape`, or None when the shapes cannot match."""
    lead = grad.ndim - len(shape)
    if lead < 0:
        return None
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1 and grad.shape[i + lead] != 1)
    if axes:
        grad = np.add.reduce(grad, axis=axes, keepdims=True)
    if lead:
        grad = grad.reshape(grad.shape[lead:])
    return grad if grad.shape == shape else None


def _validate(node: GradNode, outputs: tuple) -> tuple:
    """Fit each input gradient to the input's shape and dtype; the one place outputs are checked."""
    if not isinstance(outputs, tuple) or len(outputs) != len(node.edges):
        raise BackwardError(node, f"backward returned {outputs!r:.80}, expected {len(node.edges)} gradients")
    fitted = []
    for slot, (edge, grad) in enumerate(zip(node.edges, outputs)):
        if edge is None or grad is None:
            fitted.append(None)
            continue
        shape, dtype = edge.out_shape, edge.out_dtype  # the input's: it is the output of the node it flows to
        if grad.shape != shape:
            reduced = _sum_to(grad, shape)
            if reduced is None:
                raise BackwardError(
                    node,
                    f"gradient for input {node.op.inputs[slot]} has shape {list(grad.shape)}, "
                    f"which does not reduce to the input's shape {list(shape)}",
                )
            grad = reduced
        if grad.dtype != dtype:
            grad = grad.astype(dtype)
        elif fitted and any(grad is other for other in fitted):  # one array sent two ways (add): its own copy
            grad = grad.copy()
        fitted.append(grad)
    return tuple(fitted)


def _run_hooks(node: GradNode, grad: np.ndarray) -> np.ndarray:
    for hook in node.hooks:
        try:
            result = hook(Tensor(grad))
        except Exception as exc:
            raise BackwardError(
                node, f"hook {getattr(hook, '__name__', hook)!s} failed: {type(exc).__name__}: {exc}"
            ) from exc
        if result is not None:  # a copy in the node's dtype: the hook's array stays the hook's
            grad = np.array(result._data if isinstance(result, Tensor) else result, dtype=node.out_dtype)
            if grad.shape != node.out_shape:
                raise BackwardError(
                    node,
                    f"hook {getattr(hook, '__name__', hook)!s} returned shape "
                    f"{list(grad.shape)}, expected {list(node.out_shape)}",
                )
    return grad


def _run_node(task: GraphTask, node: GradNode, grad: np.ndarray) -> tuple:
    try:
        outputs = node.op.backward(grad, *node.saved, **node.attrs)
    except Exception as exc:
        raise BackwardError(node, f"{type(exc).__name__}: {exc}") from exc
    fitted = _validate(node, outputs)
    if not task.retain_graph:
        node.saved, node.versions = None, ()
    return fitted


def _writable(grad: np.ndarray) -> np.ndarray:
    """`grad` itself, or a copy of a read-only one (sum's and mean's broadcast views): a gradient handed to
    the user, as `.grad` or by grad(), is theirs to modify in place (clipping, scaling)."""
    return grad if type(grad) is np.ndarray and grad.flags.writeable else np.array(grad)


def _accumulate(node: AccumulationNode, grad: np.ndarray, into_grad: bool) -> None:
    """Add into the leaf's `.grad` (unless grad() runs the node), then run its post-accumulate hooks (their
    errors are theirs to word: they reach the caller of backward() as raised).

    The read-modify-write of `.grad` holds the node's lock, as PyTorch's AccumulateGrad does: passes in
    other threads may add into the same leaf. The hooks run after it is released: one may block (an
    allreduce waiting for other ranks) or run a backward itself."""
    leaf = node.leaf()
    if into_grad and leaf is not None:
        with node.lock:
            leaf.grad = Tensor(_writable(grad) if leaf.grad is None else leaf.grad._data + grad)
        for hook in node.post_hooks or ():
            hook(leaf)


def queue_callback(callback: Callable[[], None]) -> None:
    """Run `callback()` once the backward pass running in this thread has run all its nodes, before it
    returns (PyTorch's `queue_callback`: DataParallel waits for its last allreduce there)."""
    tasks = getattr(_running, "tasks", None)
    if not tasks:
        raise RuntimeError("queue_callback: no backward pass is running in this thread")
    tasks[-1].callbacks.append(callback)


def _execute(task: GraphTask) -> None:
    tasks = _running.__dict__.setdefault("tasks", [])
    tasks.append(task)
    observers = task.observers
    try:
        for observer in observers:
            observer.pass_begin()
        with np.errstate(all="ignore"):  # NaN and Inf in gradients are reported by grad_stats and `diff`
            _run_graph(task)
        if task.callbacks:  # the pass's records reach the file first: a wait for other ranks there may never
            flush()  # return, and a launcher kills the ranks left waiting for a dead one with SIGKILL
        for callback in task.callbacks:
            callback()
    finally:
        tasks.pop()
    for observer in observers:
        observer.pass_end()
    flush()


def _run_graph(task: GraphTask) -> None:
    deps, holders, captured, stops, observers, every_node = (
        task.dependencies,
        task.holders,
        task.captured,
        task.stops,
        task.observers,
        task.every_node,
    )
    ready = deque(node for node in holders if deps.get(node) == 0)
    while ready:
        node = ready.popleft()
        grad = holders.pop(node, None)
        if grad is not None and node.hooks:
            grad = _run_hooks(node, grad)
        if node in captured:
            captured[node] = grad
            if node in stops:  # grad(): this input's gradient is the answer, and nothing needed lies beyond
                continue
        if grad is None:  # nothing reached this node: its successors get nothing from it either
            outputs = (None,) * len(node.edges)
        else:
            if observers and (every_node or node.tagged):
                for observer in observers:
                    observer.node_begin(node, grad)
            if type(node) is AccumulationNode:
                _accumulate(node, grad, task.accumulate)
                outputs = ()
            else:
                outputs = _run_node(task, node, grad)
        for nxt, g in zip(node.edges, outputs):
            if nxt is None or nxt not in deps:
                continue
            if g is not None:
                held = holders.get(nxt)
                holders[nxt] = g if held is None else held + g
                if type(nxt) is AccumulationNode:
                    nxt.producer = node
            deps[nxt] -= 1
            if deps[nxt] == 0:
                ready.append(nxt)
        if observers and grad is not None and (every_node or node.tagged):
            for observer in observers:
                observer.node_finish(node, grad, outputs)


def _root_grads(tensors: Sequence[Tensor], grad_tensors: Sequence[Tensor | None] | None) -> dict:
    if grad_tensors is not None and len(grad_tensors) != len(tensors):
        raise ValueError(f"backward: {len(tensors)} tensors but {len(grad_tensors)} grad_tensors")
    roots: dict[GradNode, np.ndarray] = {}
    for i, t in enumerate(tensors):
        if t.stop_gradient:
            raise RuntimeError(
                f"backward: tensor {t.name} has stop_gradient=True: it depends on no tensor with "
                "stop_gradient=False (set that on the leaves you want gradients for)"
            )
        given = grad_tensors[i] if grad_tensors is not None else None
        if given is None:
            g = np.empty_like(t._data)
            g.fill(1)  # two C calls: np.ones_like is a Python wrapper costing more than a scalar loss's backward step
        else:
            g = np.array(
                given._data if isinstance(given, Tensor) else given, dtype=t.dtype
            )  # a copy: yours stays yours
            if g.shape != t._data.shape:
                raise ValueError(f"backward: grad_tensor for {t.name} has shape {list(g.shape)}, expected {t.shape}")
        node = t._grad_node()
        roots[node] = roots[node] + g if node in roots else g
    return roots


def backward(
    tensors: Tensor | Sequence[Tensor],
    grad_tensors: Tensor | Sequence[Tensor | None] | None = None,
    retain_graph: bool = False,
    dump_backward_graph_path: str | Path | None = None,
) -> None:
    """Accumulate d(tensors)/d(leaf) into every reachable leaf's `.grad` (`paddle.autograd.backward`);
    with `dump_backward_graph_path`, write the graph it ran there (see `graphviz`)."""
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    if isinstance(grad_tensors, Tensor):
        grad_tensors = [grad_tensors]
    _execute(GraphTask(_root_grads(tensors, grad_tensors), retain_graph, dump_path=dump_backward_graph_path))


def tensor_backward(
    self: Tensor,
    grad_tensor: Tensor | None = None,
    retain_graph: bool = False,
    dump_backward_graph_path: str | Path | None = None,
) -> None:
    """`Tensor.backward`: accumulate this tensor's gradient into every leaf it depends on; with
    `dump_backward_graph_path` (a directory), write the graph of this backward there (Graphviz, SVG, forward
    call stacks)."""
    backward([self], None if grad_tensor is None else [grad_tensor], retain_graph, dump_backward_graph_path)


def grad(
    outputs: Tensor | Sequence[Tensor],
    inputs: Tensor | Sequence[Tensor],
    grad_outputs: Tensor | Sequence[Tensor | None] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused: bool = False,
    no_grad_vars: Tensor | Sequence[Tensor] | None = None,
    dump_backward_graph_path: str | Path | None = None,
) -> list[Tensor | None]:
    """The gradients of `outputs` with respect to `inputs`, without touching any `.grad` (Paddle's
    arguments in Paddle's order; higher-order gradients and `no_grad_vars` are not supported)."""
    refuse_unsupported(
        "grad",
        create_graph=create_graph and "True",
        only_inputs=not only_inputs and "False",
        no_grad_vars=no_grad_vars is not None and "tensors",
    )
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs]
    targets = []
    for i, t in enumerate(inputs):
        if t.stop_gradient:
            raise RuntimeError(f"grad: input {i} ({t.name}) has stop_gradient=True")
        targets.append(t._grad_node())
    task = GraphTask(
        _root_grads(outputs, grad_outputs), bool(retain_graph), dict.fromkeys(targets), dump_backward_graph_path
    )
    if not allow_unused:  # before anything runs: the graph stays whole for a retry with allow_unused=True
        for i, node in enumerate(targets):
            if node not in task.dependencies:
                raise RuntimeError(
                    f"grad: input {i} ({inputs[i].name}) is not reachable from the outputs; "
                    "pass allow_unused=True to get None for it"
                )
    _execute(task)
    return [None if g is None else Tensor(_writable(g)) for g in map(task.captured.get, targets)]
