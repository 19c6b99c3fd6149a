"""`backward_vlog_guard` and `capture_backward_subgraph_guard` on torch autograd: tag the nodes a thread
creates inside, so that backward logs them (or dumps their subgraph: `_capture`).

Torch has no hook where a node is created, so the guard installs a `TorchFunctionMode` (its stack is
per thread in C++) that, after each torch call made inside, walks back from the call's outputs (and its
first argument and `out=`, for in-place ops: `x[0] = 3` returns None) through `grad_fn` and
`next_functions`, tagging the nodes created since the innermost guard opened: every node of a composite op
(`F.linear` -> `AddmmBackward0`, `TBackward0`), in-place ops' `CopySlices`, custom `autograd.Function`s
used inside. A node's creation order is its `_sequence_nr()`, a per-thread counter: nodes older than the
guard, and other threads' nodes, are left alone (a node of another thread with a sequence number in this
guard's range could only be taken when it is an input here). Leaves created inside (`requires_grad=True`,
`requires_grad_()`) get a tensor hook, which `autograd.grad()` runs too (a node hook on their
AccumulateGrad would not).

The tag lives on the node (`node.metadata`), so it goes with the node and nothing is left behind. Guards
are a stack per thread: the innermost level wins, closing a guard removes it wherever it is (a generator
closed after a later guard opened), and one mode serves all of a thread's guards. Levels below 3 print
nothing: the mode is installed only while an open guard of the thread is 3 or more (a mode costs every torch
call, even passing it through); inside such a guard, a lower guard's nodes are marked so that the outer guard
cannot take them. Under `torch.compile` the mode and the guard step aside (Dynamo would break the graph at
them). Nodes made where the mode cannot see (a compiled region's CompiledFunctionBackward, a custom Function's
node) are found by their sequence numbers in the gaps between the calls it saw (`_State.see`), and tagged at
their guard's level when the next backward of the thread begins; the mode stays installed until then.

Untagged nodes log at the engine's level, as ours do (`dv.set_vlog_level(5)`, `vlog_guard({"engine": 5})`,
`DISTVLOG_V=5`): while it is 3 or more the mode is installed too, and a backward (`Tensor.backward`,
`autograd.backward`, `autograd.grad`) first hooks every node of its graph that no guard tagged, numbered in
creation order, parameters' AccumulateGrad nodes included (those log under `backward()` only); a guard below
3 opened meanwhile keeps its nodes silent. The mode is per thread: the engine's level reaches the thread
that set it, imported distvlog.torch or opens a guard. The nodes a backward hooks carry its calling thread's
level to autograd's device threads, which run CUDA backward passes (`_tag.engine_level`).
"""

from __future__ import annotations

import contextlib
import operator
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..logger import level_for, vlog_rules
from ..nodelog import ENGINE, Site, dump_dir, tensor_name
from . import _names
from ._capture import TorchCapture
from ._nodelog import LeafHook, leaf_name, leaf_prehook, numpy_dtype, posthook, prehook, report_failure
from ._tag import CAPTURED, KEY, SILENT, Caller, Tag, caller_here

_ACCUMULATE_SEQ = (1 << 64) - 1  # AccumulateGrad's _sequence_nr(): never "created since"
_BACKWARD = frozenset((torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad))
_next_seq = torch._C._autograd._get_sequence_nr
_push_mode = torch._C._push_on_torch_function_stack  # (TorchFunctionMode.__enter__/__exit__, without their frames)
_pop_mode = torch._C._pop_torch_function_stack
_is_compiling = torch.compiler.is_compiling
_TORCH_DIR = torch.__file__.rsplit("/", 1)[0] + "/"
_DISTVLOG_DIR = __file__.rsplit("/", 2)[0] + "/"


class _State:
    """One thread's open guards, innermost last, as [level, first sequence number]; its mode while installed."""

    def __init__(self) -> None:
        self.stack: list[list] = []
        self.loud = 0  # open guards of level >= 3
        self.top: list | None = None  # the innermost open guard, None while none of them (nor the engine) logs
        self.mode: _Tagger | None = None  # while installed
        self.tagger = _Tagger(self)
        self.captures: list[list] = []  # open capture guards as [TorchCapture, first seq], innermost last
        self.capture: list | None = None  # the innermost
        self.covered = 0  # the sequence number after the mode's last call inside a logging guard
        self.unseen: list[list] = []  # [first, end, level]: nodes made out of the mode's sight, tagged at backward

    def see(self, top: list) -> None:
        """Nodes made since the mode's last call, by code it does not see (a torch.compile'd region's
        CompiledFunctionBackward, a custom autograd.Function's node): their range, for the next backward to
        tag at the innermost guard's level."""
        now = _next_seq()
        first = max(self.covered, top[1])
        if now > first:
            last = self.unseen[-1] if self.unseen else None
            if last is not None and last[1] == first and last[2] == top[0]:
                last[1] = now
            elif len(self.unseen) < _MAX_UNSEEN:
                self.unseen.append([first, now, top[0]])
        self.covered = now

    def update(self) -> None:
        """The innermost guard, and the mode installed exactly while one of the open guards or the engine's
        level logs (a mode costs every torch call of the thread, ~3% of a small model's step, even passing
        calls through)."""
        wide = level_for(ENGINE) >= 3  # (then a guard below 3 marks its nodes, which keep out of the engine's)
        self.top = self.stack[-1] if self.stack and (self.loud or wide) else None
        self.capture = self.captures[-1] if self.captures else None
        if self.top is not None or self.capture is not None or wide or self.unseen:
            if self.mode is None:
                self.mode = self.tagger
                _push_mode(self.mode)
        elif self.mode is not None and self is getattr(_local, "state", None) and _on_top(self.mode):
            _pop_mode()
            self.mode = None
        # (else, when a mode of the user's opened since sits above ours, ours stays, passing calls through,
        # until this thread's next guard reuses it: only the thread itself can remove it, only from the top)


_local = threading.local()


def _state() -> _State:
    state = getattr(_local, "state", None)
    if state is None:
        state = _local.state = _State()
    return state


class _Tagger(TorchFunctionMode):
    """The thread's mode: each call inside a logging guard, then the tagging of what it created."""

    def __init__(self, state: _State) -> None:
        super().__init__()
        self.state = state

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        top, capture = self.state.top, self.state.capture
        if func in _BACKWARD:
            _hook_graph(args, kwargs, self.state)
        if (top is None and capture is None) or _is_compiling():
            return func(*args, **kwargs) if kwargs else func(*args)
        if top is not None and _next_seq() != self.state.covered:
            self.state.see(top)
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        untracked = first is not None and not first.requires_grad  # (`x.requires_grad_()` makes a leaf of x)
        out = func(*args, **kwargs) if kwargs else func(*args)
        if top is not None:
            self.state.covered = _next_seq()
        try:
            tensors = _touched(out, first, kwargs.get("out") if kwargs else None)
            if top is not None:
                _tag_outputs(func, tensors, first, untracked, top)
            if capture is not None:
                created: list = []
                for t in tensors:
                    if t.grad_fn is not None:
                        _walk(t.grad_fn, capture[1], created, CAPTURED, capture[0])
                if created:
                    capture[0].add(created, _user_site(with_stack=True))
        except Exception as exc:  # a failing tag must never break the user's forward
            report_failure("tagging", exc)
        return out


def _touched(out: Any, first: torch.Tensor | None, out_arg: Any) -> list[torch.Tensor]:
    """The tensors one call made or changed: its outputs, its first argument (an in-place op that returns
    something else, or nothing) and `out=`."""
    if isinstance(out, torch.Tensor):
        tensors = [out]
    elif type(out) is tuple or type(out) is list:
        tensors = [t for t in out if isinstance(t, torch.Tensor)]
    else:
        tensors = []
    if first is not None and not any(t is first for t in tensors):
        tensors.append(first)
    if isinstance(out_arg, torch.Tensor):
        tensors.append(out_arg)
    return tensors


def _hook_graph(args: tuple, kwargs: dict | None, state: _State) -> None:
    """A backward begins: tag the nodes of its graph that this thread's guards made out of the mode's sight
    (`_State.see`) and, while the engine's level logs, hook those no guard tagged (each pass of a retained
    graph hooks only what is new)."""
    try:
        if _is_compiling():
            return
        unseen, state.unseen = state.unseen, []
        caller = caller_here()
        caller.level = level_for(ENGINE)
        wide = caller.level >= 3
        if not unseen and not wide:
            return
        roots = args[0] if args else (kwargs or {}).get("tensors", (kwargs or {}).get("outputs"))
        if isinstance(roots, torch.Tensor):
            roots = (roots,)
        todo = [t.grad_fn for t in roots if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        seen: set[int] = set()
        nodes, leaves = [], []
        guarded: dict[int, list] = {}
        while todo:
            node = todo.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            tag = node.metadata.get(KEY)
            if tag is not None:  # a guard's node, or one hooked before: this backward's caller is its caller
                if getattr(tag, "level", 0) is None:
                    tag.caller = caller
            else:
                seq = node._sequence_nr()
                if seq == _ACCUMULATE_SEQ:
                    if wide and id(node.variable) not in _guarded_leaves:
                        leaves.append(node)
                else:
                    level = next((level for first, end, level in unseen if first <= seq < end), None)
                    if level is not None:
                        guarded.setdefault(level, []).append((seq, node))
                    elif wide:
                        nodes.append((seq, node))
            todo += [nxt for nxt, _ in node.next_functions if nxt is not None]
        for level, made in guarded.items():
            if level >= 3:
                _tag_nodes(made, level)
            else:
                _mark_silent(made)
        _tag_nodes(nodes, None, caller=caller)
        for node in leaves:
            node.metadata[KEY] = LeafHook(None, None, leaf_name(node.variable), caller)
            node.register_prehook(leaf_prehook)
        if unseen:
            state.update()  # (the mode may have stayed for them only)
    except Exception as exc:  # the user's backward goes on
        report_failure("hooking the graph", exc)


def _mark_silent(made: list) -> None:
    for _, node in made:
        node.metadata[KEY] = SILENT


def _tag_outputs(
    func: Any, tensors: list[torch.Tensor], first: torch.Tensor | None, untracked: bool, top: list
) -> None:
    """Tag what one call made: the nodes behind the tensors it touched, and a leaf it returned that did not
    exist, or did not require grad, before."""
    level, start = top
    created: list = []
    for t in tensors:
        fn = t.grad_fn
        if fn is not None:
            _walk(fn, start, created, KEY, SILENT)
        elif t.requires_grad and (t is not first or untracked):
            _tag_leaf(t, level, getattr(func, "__name__", "tensor"))
    if created and level >= 3:  # (else they stay marked silent by the walk)
        _tag_nodes(created, level, _user_site() if level >= 5 else None)


def _walk(fn: Any, start: int, created: list, key: str, mark: Any) -> None:
    """Collect the nodes created since `start` that have no `key` in their metadata, from `fn` back (each
    marked at once, so a node reached twice is taken once)."""
    todo = [fn]
    while todo:
        node = todo.pop()
        seq = node._sequence_nr()
        if seq < start or seq == _ACCUMULATE_SEQ:
            continue
        meta = node.metadata
        if key in meta:
            continue
        meta[key] = mark
        created.append((seq, node))
        for nxt, _ in node.next_functions:
            if nxt is not None:
                todo.append(nxt)


def _tag_nodes(created: list, level: int | None, site: Site | None = None, caller: Caller | None = None) -> None:
    """Tag the nodes one call created, numbered in creation order, with the user's forward line when known
    (which only level 5's grad_stats print). Level None: the engine's, when the node runs."""
    if len(created) > 1:
        created.sort(key=_first)
    for _, node in created:
        tag = node.metadata[KEY] = Tag(level, node.name(), site)
        tag.caller = caller
        node.register_prehook(prehook)
        node.register_hook(posthook)


_first = operator.itemgetter(0)
_MAX_UNSEEN = 256  # ranges a thread keeps for its next backward (one per stretch of compiled or Function code)


def _tag_leaf(t: torch.Tensor, level: int, api: str) -> None:
    """A leaf made inside: named as Paddle names a tensor a creation API made (`randn1_out_float32_2x3`), and
    kept out of the engine's level (its guard's level is its own, printing or not)."""
    if id(t) not in _guarded_leaves:
        weakref.finalize(t, _guarded_leaves.discard, id(t))
        _guarded_leaves.add(id(t))
    if level >= 3:
        api = api.rstrip("_")
        name = tensor_name(api, _names.next_seq(api), numpy_dtype(t.dtype), tuple(t.shape))
        t.register_hook(LeafHook(level, _user_site() if level >= 5 else None, name))


_guarded_leaves: set[int] = set()  # by id, while they live (a WeakSet would compare tensors with ==)


def _user_site(with_stack: bool = False) -> Site:
    """The first frame outside torch and distvlog: the user's forward line (and its stack when asked)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith((_TORCH_DIR, _DISTVLOG_DIR)):
        frame = frame.f_back
    return Site.at(frame, with_stack)


def _check_level(level: object) -> int:
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"backward_vlog_guard level must be an int, got {type(level).__name__} {level!r}")
    return level


class backward_vlog_guard(contextlib.ContextDecorator):
    """Tag the autograd nodes (and leaf tensors) this thread creates inside with `level`: when backward runs
    them, they log Paddle's lines at exactly that level, whatever the global verbosity (`backward()` and
    `torch.autograd.grad()` alike)."""

    def __init__(self, level: int) -> None:
        self.level = _check_level(level)

    def _recreate_cm(self) -> backward_vlog_guard:  # as a decorator: each call its own guard
        return backward_vlog_guard(self.level)

    def __enter__(self) -> None:
        if _is_compiling():  # inside a torch.compile'd function: no graph break; the region's node is logged by
            return  # a guard around the compiled call (see docs/pytorch.md)
        state = self.state = _state()  # this thread's, also when the guard is closed from another thread
        self.entry = [self.level, _next_seq()]
        state.stack.append(self.entry)
        state.loud += self.level >= 3
        if state.top is not None:
            state.see(state.top)
        state.covered = self.entry[1]
        state.update()

    def __exit__(self, *exc: object) -> None:
        if _is_compiling():
            return
        state = self.state
        if state.top is not None:
            state.see(state.top)
        if _close(state.stack, self.entry):
            state.loud -= self.entry[0] >= 3
            state.update()


class capture_backward_subgraph_guard(contextlib.ContextDecorator):
    """Capture the autograd nodes this thread creates inside; the first backward that runs them writes the
    subgraph to `dump_dir_path` when it is done (Graphviz files, forward lines, the gradients when asked)."""

    def __init__(self, dump_dir_path: str | Path, need_dump_grad_tensors: bool = False) -> None:
        self.path, self.dump_grads = dump_dir(dump_dir_path, "capture_backward_subgraph_guard"), need_dump_grad_tensors

    def _recreate_cm(self) -> capture_backward_subgraph_guard:
        return capture_backward_subgraph_guard(self.path, self.dump_grads)

    def __enter__(self) -> None:
        self.state = _state()
        self.entry = [TorchCapture(self.path, self.dump_grads), _next_seq()]
        self.state.captures.append(self.entry)
        self.state.update()

    def __exit__(self, *exc: object) -> None:
        if _close(self.state.captures, self.entry):
            self.state.update()


def _close(stack: list, entry: list) -> bool:
    """Take a guard's entry off its thread's stack wherever it is (False: it was closed already)."""
    if stack and stack[-1] is entry:
        stack.pop()
    elif any(e is entry for e in stack):
        stack[:] = [e for e in stack if e is not entry]
    else:
        return False
    return True


def _on_top(mode: _Tagger | None) -> bool:
    """Whether `mode` is the innermost torch-function mode of this thread (so popping removes it, not
    another's)."""
    depth = torch._C._len_torch_function_stack()
    return mode is not None and depth > 0 and torch._C._get_function_stack_at(depth - 1) is mode


def _sync_level() -> None:
    """The rules in force in this thread changed: the mode goes in or out with the engine's level."""
    try:
        caller_here().level = level_for(ENGINE)
        _state().update()
    except Exception as exc:  # a change of verbosity never fails for the adapter's sake
        report_failure("verbosity change", exc)


vlog_rules.on_change(_sync_level)
_sync_level()  # DISTVLOG_V / DISTVLOG_VMODULE from the start, for the importing thread
