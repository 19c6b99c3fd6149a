"""What torch's backward logs for the nodes a guard tagged: the engine's own `NodeLog`, fed from torch's hooks.

A tagged node has a pre-hook (its incoming gradient: the begin lines) and a hook (the gradients it sends: the
finish lines); a tagged leaf has a tensor hook (its gradient, as our GradNodeAccumulation). `TorchNode`
shows a torch node as the node log reads one of ours: Paddle-style name, op, out-edges, saved tensors and
the gradients, as numpy arrays (CPU tensors are read in place). So both engines print the same lines
through one implementation.

The hooks are module functions that find their node through torch (`_current_autograd_node`): a closure
holding the node, stored on that node, would be a cycle through C++ that the garbage collector cannot see.
Per backward pass (torch's graph task) a `_Pass` holds what the nodes of the pass share: gradient
statistics from producer to consumer, and one array per gradient tensor so that a tensor reads the same
wherever it is printed; torch runs `_end_pass` when the pass is done. A failing hook never breaks the
backward: the first failure of each kind is said once (a W record, on stderr too), later ones counted.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import threading
import weakref
from typing import Any

import numpy as np
import torch

from ..logger import flush, get_logger, level_for
from ..nodelog import ENGINE, NOT_READ, NodeLog, NodeView, Site, shape_text, tensor_name
from . import _names
from ._device import PENDING, on_device
from ._tag import KEY, Caller, Tag, engine_level

_current_node = torch._C._current_autograd_node
_graph_task_id = torch._C._current_graph_task_id
_will_run = torch._C._will_engine_execute_node
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"  # (its name(); torch_node says AccumulateGrad)
_log = get_logger(ENGINE)
_running = threading.local()  # per thread, the nodes begun and not finished, innermost last (see prehook)
_MAX_OPEN = 32  # entries a failed backward can leave there, kept at most
_leaf_names: dict[int, str] = {}  # by id: a WeakKeyDictionary would compare tensors with ==, elementwise


def name_leaves(named: Any) -> None:
    """Name leaf tensors in the dumps by `(name, tensor)` pairs, as `model.named_parameters()` gives them."""
    for name, tensor in named:
        if id(tensor) not in _leaf_names:
            weakref.finalize(tensor, _leaf_names.pop, id(tensor), None)
        _leaf_names[id(tensor)] = name


def leaf_name(t: torch.Tensor) -> str:
    """A leaf's name in the dumps: as `name_leaves` named it."""
    return _leaf_names.get(id(t), "None")


def _level(tagged: int | None, caller: Caller | None) -> int:
    """The level a node logs at: its guard's, else (level None) the engine's of its backward's calling thread."""
    return tagged if tagged is not None else engine_level(caller, _engine_level)


def _engine_level() -> int:
    return level_for(ENGINE)


# -- tensors as the node log reads them --------------------------------------------------------------------
@functools.cache
def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The numpy dtype a torch dtype reads as here (float32 for those numpy lacks, bfloat16)."""
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except (TypeError, RuntimeError):
        return np.dtype(np.float32)


def as_array(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's memory as a numpy array (no copy); others copied to the CPU, widened where numpy has
    no such dtype."""
    if t.requires_grad:  # (a saved input; gradients do not, but under create_graph)
        t = t.detach()
    try:
        return t.numpy()
    except (TypeError, RuntimeError):  # on another device, or bfloat16
        t = t.cpu()
        return t.numpy() if t.dtype != torch.bfloat16 else t.float().numpy()


def _shadow(t: torch.Tensor) -> np.ndarray:
    """An array of `t`'s shape and dtype holding no data (one zero, repeated)."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, numpy_dtype(t.dtype)), tuple(t.shape), (0,) * t.dim())


class _Pass:
    """What the tagged nodes of one backward pass share (see the module docstring)."""

    __slots__ = ("id", "stats", "arrays")

    def __init__(self, pass_id: int) -> None:
        self.id = pass_id
        self.stats: dict[int, tuple] = {}  # NodeLog's: id(array) -> (array, grad_stats)
        self.arrays: dict[int, tuple[torch.Tensor, np.ndarray, bool]] = {}  # id(tensor) -> (tensor, array, shadow)

    def array(self, t: torch.Tensor, level: int) -> np.ndarray:
        """`t` as the node log reads it at `level`. A device tensor below level 5, where only its shape and
        dtype print, is not copied: a copy would wait for the device at every node."""
        held = self.arrays.get(id(t))
        if held is None or held[2] and level >= 5:
            shadow = level < 5 and on_device(t)
            held = self.arrays[id(t)] = (t, _shadow(t) if shadow else as_array(t), shadow)
        return held[1]

    def release(self, t: torch.Tensor) -> None:
        """`t` arrived where it goes: its array is not printed again in this pass."""
        self.arrays.pop(id(t), None)


_passes: dict[int, _Pass] = {}
_MAX_PASSES = 16  # pass states kept: a pass that fails never reaches `_end_pass`


def _pass() -> _Pass:
    """The state of the pass running in this thread; torch calls `_end_pass` when the pass is done."""
    task = _graph_task_id()
    state = _passes.get(task)
    if state is None:
        if len(_passes) >= _MAX_PASSES:  # the oldest first (insertion order), left by failed passes
            _passes.pop(next(iter(_passes)), None)
        state = _passes[task] = _Pass(task + 1)  # (passes count from 1, as our engine's)
        torch.autograd.Variable._execution_engine.queue_callback(functools.partial(_end_pass, task))
    return state


def _end_pass(task: int) -> None:
    """The pass is over: its records reach the file, as at the end of each of our engine's passes."""
    _passes.pop(task, None)
    PENDING.drain()  # (DDP's statistics that arrived meanwhile)
    flush()


# -- nodes as the node log reads them ----------------------------------------------------------------------
class _Op:
    """What the node log reads of a node's op: its name, Paddle's `<op>_grad`, its inputs' and saved names
    (one per combination: `op_of`)."""

    __slots__ = ("name", "grad_name", "inputs", "saves")

    def __init__(self, name: str, inputs: tuple[str, ...], saves: tuple[str, ...]) -> None:
        self.name, self.grad_name, self.inputs, self.saves = name, f"{name}_grad", inputs, saves


op_of = functools.lru_cache(maxsize=1024)(_Op)


class Neighbour:
    """A node a tagged node sends a gradient to: named by its tag, as GradNodeAccumulation for a leaf, else by
    torch's name (`SubBackward0`: a node no guard tagged was never numbered)."""

    __slots__ = ("fn", "nr", "name", "out_shape", "out_dtype", "out_name")

    def __init__(self, fn: Any, nr: int) -> None:
        self.fn, self.nr = fn, nr
        meta = fn._input_metadata[nr]
        shape, dtype = self.out_shape, self.out_dtype = tuple(meta.shape), numpy_dtype(meta.dtype)
        name = fn.name()
        if name == ACCUMULATE_GRAD:
            self.name, self.out_name = "GradNodeAccumulation", leaf_name(fn.variable)
            return
        tag = fn.metadata.get(KEY)
        if type(tag) is Tag:
            self.name, self.out_name = tag.name, tensor_name(tag.op, tag.seq, dtype, shape)
        else:
            self.name, self.out_name = name, _untagged_name(name, dtype, shape)

    def __repr__(self) -> str:
        return f"{self.name}(0x{id(self.fn):x})"


@functools.lru_cache(maxsize=4096)
def _untagged_name(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> str:
    return f"{name}_out_{dtype.name}_{shape_text(shape)}"


@functools.cache
def _plan(kind: type, op: str, edges: int) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """Per node type: the names of its inputs, and its saved attributes with their names in the dumps, the
    inputs first in their order (torch lists them by name), torch's own size and stride bookkeeping left
    out."""
    inputs = _names.slot_names(op, edges)
    saved = [
        (attr, _names.saved_name(attr[7:]))
        for attr in dir(kind)
        if attr.startswith("_saved_") and not attr.endswith(("_sym_sizes", "_sym_strides"))
    ]
    saved.sort(key=lambda item: inputs.index(item[1]) if item[1] in inputs else len(inputs))
    return inputs, tuple(saved)


class TorchNode(NodeView):
    """A tagged torch node, read as the node log reads a GradNode. Built in the node's pre-hook, before it
    runs: its saved tensors are read then (a pass without retain_graph releases them as the node runs)."""

    __slots__ = ("fn", "name", "seq", "op", "edges", "saved", "attrs", "site", "out_shape", "out_dtype")
    backend = "torch"

    def __init__(self, fn: Any, tag: Tag, grad: np.ndarray, state: _Pass, level: int) -> None:
        self.fn, self.name, self.seq, self.site = fn, tag.name, tag.seq, tag.site
        self.out_shape, self.out_dtype = grad.shape, grad.dtype
        edges: list[Neighbour | None] = []
        for nxt, nr in fn.next_functions:
            if nxt is None:
                edges.append(None)
                continue
            for view in edges:  # one view per next node and slot: `x * x` sends x two
                if view is not None and view.fn is nxt and view.nr == nr:
                    break
            else:
                view = Neighbour(nxt, nr)
            edges.append(view)
        self.edges = edges = tuple(edges)
        inputs, plan = _plan(type(fn), tag.op, len(edges))
        saves: list[str] = []
        self.saved: list[np.ndarray] = []
        self.attrs: dict[str, Any] = {}
        for attr, name in plan:
            if _packed(getattr(fn, "_raw" + attr, None)):
                saves.append(name)  # shown as not read
                self.saved.append(NOT_READ)
                continue
            try:
                value = getattr(fn, attr)
            except RuntimeError:  # changed in place since, or released: the backward itself says so
                continue
            if isinstance(value, torch.Tensor):
                saves.append(name)
                self.saved.append(state.array(value, level))
            elif type(value) in (int, float, bool):
                self.attrs[name] = value
        self.op = op_of(tag.op, inputs, tuple(saves))

    def __repr__(self) -> str:
        return f"{self.name}(0x{id(self.fn):x})"


def _packed(raw: Any) -> bool:
    """Whether a saved tensor went through a `saved_tensors_hooks` pack hook (activation checkpointing,
    `save_on_cpu`, offloading): unpacking it is the hook's to do, once (checkpointing's recompute raises on a
    second unpack), so the node log leaves it unread."""
    if raw is None:
        return False
    if isinstance(raw, (list, tuple)):
        return any(_packed(r) for r in raw)
    return getattr(raw, "unpack_hook", None) is not None


class LeafNode(NodeView):
    """A leaf created inside a guard, read as our GradNodeAccumulation (labelled by torch's AccumulateGrad
    node, which runs the leaf's hooks, under autograd.grad() too)."""

    __slots__ = ("hook", "fn", "out_name", "out_shape", "out_dtype")
    op, seq, edges, saved, attrs, in_meta = op_of("accumulation", ("grad",), ()), 0, (), (), {}, ()
    name, accumulates = "GradNodeAccumulation", True
    backend = "torch"

    def __init__(self, hook: LeafHook, grad: np.ndarray) -> None:
        self.hook, self.fn = hook, _current_node()
        self.out_name, self.out_shape, self.out_dtype = hook.name, grad.shape, grad.dtype

    @property
    def site(self) -> Site:
        return self.hook.site

    def __repr__(self) -> str:
        return f"GradNodeAccumulation(0x{id(self.fn):x})"


class _Runs:
    """`_pending`'s view of which nodes this pass runs (torch does not say how many gradients each still
    waits for)."""

    def __contains__(self, node: Any) -> bool:
        try:
            return _will_run(node.fn)
        except RuntimeError:  # a leaf under autograd.grad(): torch computes its gradient only for an input
            return True

    def __getitem__(self, node: Any) -> None:
        return None


_RUNS = _Runs()


# -- the hooks ---------------------------------------------------------------------------------------------
def prehook(grad_outputs: tuple) -> None:
    """A tagged node is about to run: its begin lines. What its hook needs is kept per thread on a stack:
    a node may run a backward of its own before it finishes (reentrant checkpointing)."""
    try:
        grad = grad_outputs[0]
        if grad is None:  # a node of several outputs: its first gradient (Paddle's nodes print one)
            grad = next((g for g in grad_outputs if g is not None), None)
            if grad is None:
                return  # nothing reached it: it sends nothing either
        fn = _current_node()
        tag = fn.metadata[KEY]
        level = _level(tag.level, tag.caller)
        if level < 3:
            return  # (hooked while the engine's level logged, which it no longer does)
        if tag.torch_name == _COMPILED and not _said:
            _say_compiled(fn)
        state = _pass()
        array = state.array(grad, level)
        nlog = NodeLog(TorchNode(fn, tag, array, state, level), level, state.id, state.stats, torch_node=tag.torch_name)
        nlog.begin(array)
        stack = _running.__dict__.setdefault("open", [])
        stack.append((fn, nlog, grad, state))
        if len(stack) > _MAX_OPEN:
            del stack[0]
    except Exception as exc:  # the user's backward goes on
        report_failure("backward pre-hook", exc)


def posthook(grad_inputs: tuple, grad_outputs: tuple) -> None:
    """A tagged node ran: its finish lines, and the nodes it reached."""
    try:
        stack = _running.__dict__.get("open")
        if not stack:
            return
        fn = _current_node()
        i = len(stack) - 1
        while i >= 0 and stack[i][0] is not fn:
            i -= 1
        if i < 0:
            return  # its pre-hook logged nothing
        _, nlog, grad, state = stack[i]
        del stack[i:]  # (above it: nodes of a nested backward that failed)
        outputs = tuple(None if g is None else state.array(g, nlog.level) for g in grad_inputs)
        nlog.finish(state.array(grad, nlog.level), outputs, _RUNS, None)
        if all(g is not grad for g in grad_inputs):
            state.release(grad)
    except Exception as exc:
        report_failure("backward hook", exc)


class LeafHook:
    """The tensor hook of a leaf created inside a guard (or, level None, the pre-hook data of a parameter's
    AccumulateGrad hooked for the engine's level): its gradient, logged as GradNodeAccumulation's."""

    __slots__ = ("level", "site", "name", "caller", "__weakref__")

    def __init__(self, level: int | None, site: Site | None, name: str, caller: Caller | None = None) -> None:
        self.level, self.site, self.name, self.caller = level, site, name, caller

    def __call__(self, grad: torch.Tensor) -> None:
        try:
            level = _level(self.level, self.caller)
            if level < 3:
                return
            state = _pass()
            array = state.array(grad, level)
            nlog = NodeLog(LeafNode(self, array), level, state.id, state.stats, torch_node="AccumulateGrad")
            nlog.begin(array)
            nlog.finish(array, (), _RUNS, None)
            state.release(grad)
        except Exception as exc:
            report_failure("leaf tensor hook", exc)


def leaf_prehook(grad_outputs: tuple) -> None:
    """An AccumulateGrad hooked for the engine's level is about to run: its leaf's lines."""
    try:
        if grad_outputs[0] is not None:
            _current_node().metadata[KEY](grad_outputs[0])
    except Exception as exc:
        report_failure("leaf pre-hook", exc)


_COMPILED = "CompiledFunctionBackward"
_said: list[str] = []


def _say_compiled(fn: Any) -> None:
    """Once per process: a torch.compile'd region runs as one node, logged as one."""
    _said.append(_COMPILED)
    _log.info(
        f"distvlog.torch: {fn.name()}(0x{id(fn):x}) is a torch.compile'd region run as one backward node: it "
        "logs as one (its gradients in and out), not op by op; to see its ops node by node, run the region "
        "eagerly (torch.compiler.disable on it, or TORCHDYNAMO_DISABLE=1)",
        node=fn.name(),
    )


# -- failures: said once, counted --------------------------------------------------------------------------
_failures: dict[str, int] = {}


def report_failure(what: str, exc: BaseException) -> None:
    """The first failure of `what` as a W record (echoed to stderr); later ones counted, said at exit."""
    count = _failures[what] = _failures.get(what, 0) + 1
    if count == 1:
        with contextlib.suppress(Exception):
            _log.warning(
                f"distvlog.torch: the {what} failed ({type(exc).__name__}: {exc}); the job goes on without "
                "those lines, later failures are counted"
            )


@atexit.register
def _say_counts() -> None:
    for what, count in _failures.items():
        if count > 1:
            with contextlib.suppress(Exception):
                _log.warning(f"distvlog.torch: the {what} failed {count} times in all")
