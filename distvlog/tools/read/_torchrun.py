"""torchrun's `error.json` (`--log-dir D --redirects 3`: D/<run>_<id>/attempt_K/R/error.json, written for an
uncaught exception under torchrun's `@record`), read as one E record of the worker's rank at its
timestamp. The worker's stdout.log and stderr.log beside it are text read line by line (_lines).
"""

from __future__ import annotations

from typing import Any

import orjson

from ._lines import record


def is_error_json(head: bytes) -> bool:
    return b'"message"' in head[:256] and (b'"extraInfo"' in head or b'"py_callstack"' in head)


def error_records(data: bytes, rank: int, mtime_us: int, name: str) -> list[dict[str, Any]]:
    """error.json as one E record: the traceback it holds, at its timestamp (epoch seconds, a string)."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        obj = {}
    message = obj.get("message") if isinstance(obj, dict) else None
    info = message.get("extraInfo", {}) if isinstance(message, dict) else {}
    info = info if isinstance(info, dict) else {}
    text = info.get("py_callstack") or (message.get("message") if isinstance(message, dict) else message)
    stamp = str(info.get("timestamp", ""))
    ts = int(stamp) * 1_000_000 if stamp.isdigit() else mtime_us
    return [record(ts, "E", rank, 0, name, 0, str(text or data[:2000].decode("utf-8", "replace")).rstrip())]
