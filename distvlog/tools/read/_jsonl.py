"""Turning a chunk of JSON lines into a block: one object per line, also rendered as our glog text.

JSON lines are decoded one by one (orjson); they are the slower input, and the glog text is what the merge
writes, greps and filters. Lines that are not JSON objects with an integer `ts` are skipped and counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from ...logger._render import logfmt_value
from ._block import Counts
from ._record import CORE, META_EVENT

_PLACEHOLDER = "0" * 20  # the timestamp, written afterwards by _bytes.restamp


@dataclass
class ParsedJson:
    text: bytes
    start: np.ndarray
    ts: np.ndarray
    rank: np.ndarray
    severity: np.ndarray
    objs: list[dict[str, Any]]
    carry: np.ndarray  # the chunk's last bytes, which belong to the next chunk (a copy)
    counts: Counts


def render(obj: dict[str, Any], rank: int) -> str:
    """The glog text of a JSON-lines record (timestamp left as a placeholder)."""
    event = obj.get("event")
    event = "" if event is None else event if isinstance(event, str) else str(event)
    if event == META_EVENT and isinstance(obj.get("meta"), dict):
        event += " " + json.dumps(obj["meta"], separators=(",", ":"))
        pairs = ""
    else:
        pairs = "".join(
            f" {k}={logfmt_value(v)}" for k, v in obj.items() if k not in CORE or k == "v" and v is not None
        )
    first, nl, rest = event.partition("\n")
    sev = str(obj.get("severity") or "I")[:1]
    return (
        f"{sev}{_PLACEHOLDER} {obj.get('tid', 0)} {obj.get('file', '?')}:{obj.get('line', 0)}] "
        f"[rank {rank}] {first}{pairs}{nl}{rest}\n"
    )


def parse(data: np.ndarray, n: int, eof: bool, own_rank: int) -> ParsedJson:
    counts = Counts()
    end = n if eof else int(np.flatnonzero(data[:n] == 10)[-1]) + 1 if (data[:n] == 10).any() else 0
    objs, texts, ts, ranks = [], [], [], []
    lines = data[:end].tobytes().split(b"\n")
    cut_short = lines.pop() if lines else b""  # not empty: the file ends without a newline
    for i, line in enumerate(lines + [cut_short] if cut_short else lines):
        if not line.strip():
            counts.skipped["empty line"] += 1
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            reason = "binary garbage" if b"\0" in line else "not a JSON object"
            counts.skipped["truncated last line" if i == len(lines) else reason] += 1
            continue
        if not isinstance(obj, dict) or type(obj.get("ts")) is not int:
            counts.skipped["JSON without an integer ts"] += 1
            continue
        rank = obj.get("rank")
        rank = rank if type(rank) is int and rank >= 0 else own_rank
        objs.append(obj)
        ts.append(obj["ts"])
        ranks.append(rank)
        texts.append(render(obj, rank).encode("utf-8", "backslashreplace"))
    counts.lines += len(objs)
    rank_arr = np.array(ranks, np.int64)
    uniq, per = np.unique(rank_arr, return_counts=True)
    counts.records.update(dict(zip(uniq.tolist(), per.tolist())))
    lengths = np.fromiter(map(len, texts), np.int64, len(texts))
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])) if len(texts) else np.zeros(0, np.int64)
    severity = np.frombuffer(b"".join(t[:1] for t in texts), np.uint8).copy()
    return ParsedJson(
        b"".join(texts),
        starts.astype(np.int64),
        np.array(ts, np.int64),
        rank_arr,
        severity,
        objs,
        data[end:n].copy(),
        counts,
    )
