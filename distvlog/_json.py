"""JSON lines for records, by the logger and the tools alike: NaN and ±Inf fields are spelled "NaN",
"Infinity" and "-Infinity" (as protobuf's JSON mapping does). JSON has no such numbers and orjson writes
them as null, which would hide the very values a gradient debugger exists to show."""

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
    if b"null" in line:  # maybe a NaN or Inf field: spelled out (top-level fields, the ones records have)
        line = orjson.dumps({k: _spelled(v) for k, v in record.items()}, option=_OPTIONS, default=str)
    return line


def _spelled(value: Any) -> Any:
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        return "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"
    return value


def number(value: Any) -> Any:
    """A field read back from JSON: "NaN", "Infinity" and "-Infinity" are floats again."""
    return _NUMBERS.get(value, value) if type(value) is str else value
