"""Hypothesis strategies for what users log (arbitrary messages, field names and values), and the equality
a read-back record must satisfy: the same values, as the format defines them (tuples as lists, dict keys as
str, numpy values as the Python values they print as, a surrogate pair as its character, NaN equal to NaN,
types exact: 1, 1.0 and True differ)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st

from distvlog import format as fmt

# Names the record owns or that a log call takes itself (format section 4; `event`, `self` and `level` are
# the logger methods' own parameters).
RESERVED = {*fmt.CORE_FIELDS, "self", "level"}
# Texts the format treats specially, and lines that look like records.
TRICKY = [
    "",
    " ",
    "=",
    '"',
    "\\",
    "a=b",
    "x=1",
    "+lines",
    "+lines=3",
    "nan",
    "NaN",
    "-Infinity",
    "inf",
    "True",
    "None",
    "007",
    "1.5",
    "[1]",
    "{}",
    "{x",
    "[1,",
    "]",
    "\0",
    "\0NaN",
    "\r",
    "\n",
    "\t",
    "\x1b[31m",
    "\u2028",
    "\udc80",
    "distvlog-meta {}",
    "E1201 13:00:00.000000 1 parallel.py:1] [rank 1] allreduce mismatch",
    "[I1201 13:00:00.000000 1 c10d] x",
    "I20261201 13:00:00.000000 1 x.cc:1] glog 0.7",
    "Log file created at: 2026/12/01 13:00:00",
]
_chars = st.characters(codec=None)  # any code point, lone surrogates included
_bytes_like = st.binary(max_size=24).map(lambda b: b.decode("utf-8", "surrogateescape"))
_text = st.one_of(st.text(_chars, max_size=24), _bytes_like, st.sampled_from(TRICKY))
text_strategy = st.one_of(_text, st.lists(_text, min_size=2, max_size=4).map("".join))


def message_strategy() -> st.SearchStrategy:
    lines = st.lists(text_strategy, min_size=1, max_size=5).map("\n".join)
    return st.one_of(lines, st.none(), st.integers(), st.sampled_from(TRICKY))


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(2**80), 2**80),
    st.floats(),  # NaN and ±inf included
    text_strategy,
    st.floats(width=32).map(np.float32),
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
)
_keys = st.one_of(text_strategy, st.integers(-5, 5), st.booleans(), st.none())
values_strategy = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(_keys, children, max_size=4),
        st.lists(st.floats(), max_size=4).map(lambda xs: np.array(xs, np.float64)),
    ),
    max_leaves=8,
)
names_strategy = text_strategy.filter(lambda name: name not in RESERVED)


def fields_strategy(max_size: int = 5) -> st.SearchStrategy:
    return st.dictionaries(names_strategy, values_strategy, max_size=max_size)


def text_of(text: str) -> str:
    """What a written text reads back as: itself, but for a high surrogate followed by a low one, which is the
    character the pair encodes (format 3.2: JSON, which every quoted or escaped text is, knows no other)."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def expected(value: Any) -> Any:
    """What a written value reads back as (format 2.5 and 3.2)."""
    if type(value) is str:
        return text_of(value)
    if isinstance(value, np.ndarray):
        return expected(value.tolist())
    if isinstance(value, np.generic):
        kind = value.dtype.kind
        return float(str(value)) if kind == "f" else bool(value) if kind == "b" else int(value)
    if isinstance(value, (list, tuple)):
        return [expected(v) for v in value]
    if isinstance(value, dict):
        return {text_of(k if type(k) is str else str(k)): expected(v) for k, v in value.items()}
    return value


def same(got: Any, written: Any) -> bool:
    """Whether `got` (read back) is `written` as the format defines it, exactly."""
    return _equal(got, expected(written))


def _equal(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return a == b or (math.isnan(a) and math.isnan(b))
    if type(a) is list:
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b
