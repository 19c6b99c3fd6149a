"""The profiler's per-rank Chrome traces (Kineto JSON, `torch.profiler` `export_chrome_trace` or
`tensorboard_trace_handler`), read as records: its collectives, and the trace itself.

Only the collectives become records, `KINETO_OP` at their start with `op`, `dur_us`, `cat` and the event's
`args`: c10d's ops (`c10d::allreduce_`), the backend's (`gloo:all_reduce`, `nccl:all_reduce`),
`record_param_comms` and NCCL kernels; a trace holds thousands of other events, which stay in the trace.
A first record, `KINETO_TRACE`, carries `distributedInfo` (backend, rank, world size, groups). Times are
`baseTimeNanoseconds` + `ts` (µs); traces without a base have absolute `ts`. The rank is
`distributedInfo.rank`, missing when profiling started before the process group existed.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from ... import format as fmt

KINETO_TRACE = "kineto trace"
KINETO_OP = "kineto collective"
_COLLECTIVE = re.compile(r"c10d::|nccl:|gloo:|record_param_comms$|^ncclDevKernel|^ncclKernel")


def looks_like(head: bytes) -> bool:
    window = head[:4096]
    return b'"schemaVersion"' in window and (b'"traceEvents"' in window or b'"distributedInfo"' in window)


def load(data: bytes) -> dict[str, Any]:
    try:
        trace = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not a readable Chrome trace ({exc})") from None
    if not isinstance(trace, dict):
        raise ValueError("not a Chrome trace object")
    return trace


def rank_of(trace: dict[str, Any]) -> int | None:
    info = trace.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 else None


def records(trace: dict[str, Any], rank: int) -> list[dict[str, Any]]:
    base = trace.get("baseTimeNanoseconds")
    base_us = base // 1000 if isinstance(base, int) else 0
    info = trace.get("distributedInfo") if isinstance(trace.get("distributedInfo"), dict) else {}
    common = {fmt.RANK: rank, fmt.FILE: "kineto", fmt.LINE: 0}
    out = []
    for event in trace.get("traceEvents") or ():
        if not isinstance(event, dict) or not _COLLECTIVE.search(str(event.get("name", ""))):
            continue
        ts, dur = event.get("ts"), event.get("dur")
        if not isinstance(ts, (int, float)):
            continue
        tid = event.get("tid")
        out.append(
            {
                fmt.TS: base_us + int(ts),
                fmt.SEVERITY: "I",
                **common,
                fmt.TID: tid if isinstance(tid, int) else 0,
                fmt.EVENT: KINETO_OP,
                "op": str(event["name"]),
                "dur_us": dur if isinstance(dur, (int, float)) else None,
                "cat": str(event.get("cat", "")),
                "args": event.get("args") if isinstance(event.get("args"), dict) else {},
            }
        )
    out.sort(key=lambda r: r[fmt.TS])
    first = out[0][fmt.TS] if out else base_us
    head = {fmt.TS: first, fmt.SEVERITY: "I", **common, fmt.TID: 0, fmt.EVENT: KINETO_TRACE, "info": info}
    return [head, *out]
