"""JSON for records, by the logger and the tools alike: NaN and ±Inf fields are spelled "NaN", "Infinity"
and "-Infinity" (as protobuf's JSON mapping does). JSON has no such numbers and orjson writes them as null,
which would hide the very values a gradient debugger exists to show. Top-level fields only: the ones
records have (a NaN inside a list field is still null)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS
_NUMBERS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def json_line(record: dict[str, Any]) -> bytes:
    """One record as a JSON line (values orjson cannot encode are written as their str())."""
    line = orjson.dumps(record, option=_OPTIONS, default=str)
    if b"null" in line:  # maybe a NaN or Inf field (or a None, or "null" in a text: then the line stands)
        fields = spelled(record)
        if fields is not record:
            line = orjson.dumps(fields, option=_OPTIONS, default=str)
    return line


def spelled(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with NaN and Inf values spelled out; the same dict when it has none."""
    if not any(_non_finite(v) for v in fields.values()):
        return fields
    return {k: ("NaN" if v != v else "Infinity" if v > 0 else "-Infinity") if _non_finite(v) else v
            for k, v in fields.items()}


def _non_finite(value: Any) -> bool:
    return isinstance(value, (float, np.floating)) and not math.isfinite(value)


def number(value: Any) -> Any:
    """A field read back from JSON: "NaN", "Infinity" and "-Infinity" are floats again."""
    return _NUMBERS.get(value, value) if type(value) is str else value
