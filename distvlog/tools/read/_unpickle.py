"""Pickles from other programs (PyTorch's Flight Recorder dumps), read as plain data and nothing else.

A pickle is a program: `pickle.load` on an untrusted file can import and call anything. Here a pickle may
build only dicts, lists, tuples, sets, strings, bytes, numbers, booleans and None. Every opcode that
reaches for a global (GLOBAL, STACK_GLOBAL, INST, the extension registry) goes through `find_class`, which
refuses; persistent ids are refused by the C unpickler itself. Without a global there is nothing to call,
so REDUCE, BUILD and NEWOBJ have nothing to act on.

A pickle cut short (a dump interrupted by the job's death) fails in the C unpickler; it is then replayed
by a small interpreter of the same plain-data opcodes, which keeps what was built before the cut: a list
keeps its whole items and drops the one being built when the cut came.
"""

from __future__ import annotations

import io
import pickle
import pickletools
from dataclasses import dataclass
from typing import Any


class Refused(ValueError):
    """The pickle names a class or function: it is not plain data."""


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise Refused(f"names {module}.{name}; only plain data is read (nothing in it was run)")


@dataclass
class Cut:
    """A pickle that ended before its STOP: what was built before the cut."""

    obj: Any


def loads(data: bytes) -> Any | Cut:
    """The plain data in `data`; a `Cut` when the pickle ends early. Raises Refused for anything else, and
    ValueError for bytes that are not a pickle."""
    try:
        return _Plain(io.BytesIO(data)).load()
    except Refused:
        raise
    except (EOFError, pickle.UnpicklingError, ValueError, TypeError, IndexError, KeyError, MemoryError) as exc:
        cut = _replay(data)
        if cut is None:
            raise ValueError(f"not a readable pickle ({exc})") from None
        return cut


_MARK = object()
_SCALARS = frozenset(
    [
        "INT",
        "BININT",
        "BININT1",
        "BININT2",
        "LONG",
        "LONG1",
        "LONG4",
        "FLOAT",
        "BINFLOAT",
        "STRING",
        "BINSTRING",
        "SHORT_BINSTRING",
        "UNICODE",
        "BINUNICODE",
        "SHORT_BINUNICODE",
        "BINUNICODE8",
        "BINBYTES",
        "SHORT_BINBYTES",
        "BINBYTES8",
        "BYTEARRAY8",
    ]
)
_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_EMPTY = {"EMPTY_LIST": list, "EMPTY_DICT": dict, "EMPTY_TUPLE": tuple, "EMPTY_SET": set}
_TUPLES = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}
_IGNORED = frozenset({"PROTO", "FRAME"})


class _Machine:
    """The plain-data opcodes of pickle protocols 0-5, one at a time."""

    def __init__(self) -> None:
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}
        self.done = False

    def step(self, name: str, arg: Any) -> None:
        stack = self.stack
        if name in _SCALARS:
            stack.append(arg)
        elif name in _CONSTANTS:
            stack.append(_CONSTANTS[name])
        elif name in _EMPTY:
            stack.append(_EMPTY[name]())
        elif name in _TUPLES:
            n = _TUPLES[name]
            stack[-n:] = [tuple(stack[-n:])]
        elif name in _IGNORED:
            pass
        elif name == "STOP":
            self.done = True
        else:
            getattr(self, "_" + name.lower(), self._refuse)(name, arg)

    def _refuse(self, name: str, arg: Any) -> None:
        raise Refused(f"uses the opcode {name}; only plain data is read (nothing in it was run)")

    def _items(self) -> list[Any]:
        at = len(self.stack) - 1 - self.stack[::-1].index(_MARK)
        items = self.stack[at + 1 :]
        del self.stack[at:]
        return items

    def _mark(self, name: str, arg: Any) -> None:
        self.stack.append(_MARK)

    def _pop(self, name: str, arg: Any) -> None:
        self.stack.pop()

    def _pop_mark(self, name: str, arg: Any) -> None:
        self._items()

    def _dup(self, name: str, arg: Any) -> None:
        self.stack.append(self.stack[-1])

    def _append(self, name: str, arg: Any) -> None:
        item = self.stack.pop()
        self.stack[-1].append(item)

    def _appends(self, name: str, arg: Any) -> None:
        items = self._items()
        self.stack[-1].extend(items)

    def _list(self, name: str, arg: Any) -> None:
        self.stack.append(self._items())

    def _tuple(self, name: str, arg: Any) -> None:
        self.stack.append(tuple(self._items()))

    def _dict(self, name: str, arg: Any) -> None:
        items = self._items()
        self.stack.append(dict(zip(items[::2], items[1::2])))

    def _setitem(self, name: str, arg: Any) -> None:
        value, key = self.stack.pop(), self.stack.pop()
        self.stack[-1][key] = value

    def _setitems(self, name: str, arg: Any) -> None:
        items = self._items()
        self.stack[-1].update(zip(items[::2], items[1::2]))

    def _additems(self, name: str, arg: Any) -> None:
        items = self._items()
        self.stack[-1].update(items)

    def _frozenset(self, name: str, arg: Any) -> None:
        self.stack.append(frozenset(self._items()))

    def _put(self, name: str, arg: Any) -> None:
        self.memo[arg] = self.stack[-1]

    _binput = _long_binput = _put

    def _memoize(self, name: str, arg: Any) -> None:
        self.memo[len(self.memo)] = self.stack[-1]

    def _get(self, name: str, arg: Any) -> None:
        self.stack.append(self.memo[arg])

    _binget = _long_binget = _get

    def salvage(self) -> Cut:
        """What the stack holds at the cut, its open containers closed: a list drops the item being built
        when the cut came (an incomplete record), a dict keeps what it has."""
        partial = None
        while _MARK in self.stack:
            items = self._items()
            if not self.stack:
                break
            target = self.stack[-1]
            if isinstance(target, list):
                target.extend(item for item in items if item is not partial)
            elif isinstance(target, dict):
                target.update(zip(items[::2], items[1::2]))
            partial = target
        return Cut(self.stack[0] if self.stack else None)


def _replay(data: bytes) -> Cut | None:
    """The plain data of a pickle cut short; None when it is not a pickle at all."""
    machine = _Machine()
    try:
        for op, arg, _pos in pickletools.genops(data):
            machine.step(op.name, arg)
            if machine.done:
                return None  # a whole pickle the C unpickler refused: not one of ours to repair
    except Refused:
        raise
    except (ValueError, IndexError, KeyError, TypeError, AttributeError):
        pass
    return machine.salvage() if machine.stack and isinstance(machine.stack[0], dict) else None
