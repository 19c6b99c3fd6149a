"""JSON for records, reports and traces, by the logger and the tools alike: NaN and ±Inf are spelled "NaN",
"Infinity" and "-Infinity" (as protobuf's JSON mapping does), at any depth. JSON has no such numbers and
orjson writes them as null, which would hide the very values a gradient debugger exists to show."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
_NUMBERS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def dumps(value: Any, option: int = 0) -> bytes:
    """`value` as JSON (what orjson cannot encode is written as its str()); `option`: more orjson options."""
    data = orjson.dumps(value, option=_OPTIONS | option, default=str)
    if b"null" in data:  # maybe a NaN or Inf (or a None, or "null" in a text: then the JSON stands)
        fixed = spelled(value)
        if fixed is not value:
            data = orjson.dumps(fixed, option=_OPTIONS | option, default=str)
    return data


def json_line(record: dict[str, Any]) -> bytes:
    """One record as a JSON line."""
    return dumps(record, orjson.OPT_APPEND_NEWLINE)


def spelled(value: Any) -> Any:
    """`value` with NaN and Inf spelled out inside dicts, lists, tuples and numpy arrays; `value` itself (the
    same object) when it has none."""
    if isinstance(value, (float, np.floating)):
        return value if math.isfinite(value) else "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        items = {k: spelled(v) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    if isinstance(value, (list, tuple)):
        items = [spelled(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    if isinstance(value, np.ndarray) and value.dtype.kind == "f" and not np.isfinite(value).all():
        return spelled(value.tolist())
    return value


def number(value: Any) -> Any:
    """A field read back from JSON: "NaN", "Infinity" and "-Infinity" are floats again."""
    return _NUMBERS.get(value, value) if type(value) is str else value
