"""From records to trace slices: GradNode runs, backward passes and allreduce buckets, warnings as instants.

A GradNode run goes from `<node>(0x..) begin run` to the record holding `Finish_AD_API_GRAD` on the same
thread; a backward pass from `backward begin` to `backward end`; an allreduce bucket from
`allreduce begin` to `allreduce end` with the same step and bucket on the same rank (any thread).
`grad_stats` records land in the args of their node's run. A run still open at the end of the log is a
slice up to the rank's last record, marked unfinished: that is where a crash happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ... import format as fmt
from ..read import Record

_PHASES = {
    fmt.BACKWARD_BEGIN: ("backward", "begin"),
    fmt.BACKWARD_END: ("backward", "end"),
    fmt.ALLREDUCE_BEGIN: ("allreduce", "begin"),
    fmt.ALLREDUCE_END: ("allreduce", "end"),
}
# What the reader should hand us (a regex over block text, so most records are never decoded).
WANTED = fmt.texts_pattern(fmt.BEGIN_RUN, fmt.FINISH_AD_API, *_PHASES, fmt.GRAD_STATS, *fmt.FR_EVENTS)
KINDS = ("error", "backward", "allreduce", "collective", "warning", "node", "grad_stats")  # priority for --max-events
FR_TRACK = "Flight Recorder"  # the track of a rank's collectives from its dump


@dataclass
class Slice:
    kind: str
    name: str
    rank: int
    tid: int | str
    start: int
    end: int | None = None  # None: an instant event
    args: dict[str, Any] = field(default_factory=dict)


class SliceBuilder:
    """Feed records (each rank's in time order), then `finish()` for the slices and instants."""

    def __init__(self) -> None:
        self.out: list[Slice] = []
        self._nodes: dict[tuple[int, Any], list[Slice]] = {}  # open node runs per (rank, thread)
        self._passes: dict[tuple[int, Any], list[Slice]] = {}
        self._buckets: dict[tuple[int, Any, Any], Slice] = {}
        self._last_run: dict[tuple[int, str], Slice] = {}  # (rank, node) -> its latest run
        self.last_ts: dict[int, int] = {}
        self._collectives: dict[tuple[int, Any, Any], Slice] = {}  # (rank, group, seq) -> a dump's collective
        self._enqueued: dict[int, list[int]] = {}  # rank -> when its dump's collectives were issued

    def add(self, rec: Record) -> None:
        self.last_ts[rec.rank] = max(rec.ts, self.last_ts.get(rec.rank, rec.ts))
        first = rec.event.partition("\n")[0].strip()
        track = (rec.rank, rec.tid)
        step = rec.fields.get("step")
        if (begun := fmt.begin_run_node(first)) is not None:
            node = str(rec.fields.get(fmt.NODE) or begun)
            run = Slice("node", node, rec.rank, rec.tid, rec.ts, args=_args(rec, node=node))
            self._nodes.setdefault(track, []).append(run)
            self._last_run[(rec.rank, node)] = run
        elif (api := fmt.banner_api(first, fmt.FINISH_AD_API)) is not None:
            self._close_node(track, rec, api)
        elif (phase := _PHASES.get(first)) is not None:
            self._phase(*phase, track, rec)
        elif first == fmt.GRAD_STATS:
            self._grad_stats(rec)
        elif first in fmt.FR_EVENTS and first != fmt.FR_DUMP:
            self._collective(first, rec)
        if rec.severity in "WEF":
            kind = "warning" if rec.severity == "W" else "error"
            self.out.append(
                Slice(
                    kind,
                    first[:120] or rec.severity,
                    rec.rank,
                    rec.tid,
                    rec.ts,
                    args=_args(rec, severity=rec.severity, message=rec.event, where=f"{rec.file}:{rec.line}"),
                )
            )
        if step is not None and self._passes.get(track):
            self._passes[track][-1].args.setdefault("step", step)

    def _close_node(self, track: tuple, rec: Record, api: str) -> None:
        stack = self._nodes.get(track) or []
        node = rec.fields.get(fmt.NODE)
        at = next((i for i in range(len(stack) - 1, -1, -1) if node is None or stack[i].name == node), None)
        if at is None:
            return  # its begin was not logged (level too low) or not read
        run = stack.pop(at)
        run.args["api"] = api
        self._close(run, rec)

    def _phase(self, what: str, edge: str, track: tuple, rec: Record) -> None:
        if what == "backward":
            stack = self._passes.setdefault(track, [])
            if edge == "begin":
                stack.append(
                    Slice(
                        "backward",
                        f"backward pass {rec.fields.get('pass', '')}".strip(),
                        rec.rank,
                        rec.tid,
                        rec.ts,
                        args=_args(rec),
                    )
                )
            elif stack:
                self._close(stack.pop(), rec)
            return
        key = (rec.rank, rec.fields.get("step"), rec.fields.get("bucket"))
        if edge == "begin":
            self._buckets[key] = Slice(
                "allreduce", f"allreduce bucket {key[2]}", rec.rank, rec.tid, rec.ts, args=_args(rec)
            )
        elif key in self._buckets:
            self._close(self._buckets.pop(key), rec)

    def _collective(self, event: str, rec: Record) -> None:
        """A Flight Recorder entry: a slice on the rank's collective track from its enqueue to its completion."""
        key = (rec.rank, rec.fields.get("pg"), rec.fields.get("seq"))
        if event == fmt.FR_ENQUEUED:
            name = f"{rec.fields.get('op')} #{key[2]} group {key[1]}"
            self._collectives[key] = Slice("collective", name, rec.rank, FR_TRACK, rec.ts, args=_args(rec))
            self._enqueued.setdefault(rec.rank, []).append(rec.ts)
        elif key in self._collectives:
            s = self._collectives[key]
            s.args[event.rpartition(" ")[2] + "_us"] = rec.ts
            if event == fmt.FR_COMPLETED:
                s.end = rec.ts
                self.out.append(self._collectives.pop(key))

    def _end_collective(self, s: Slice) -> None:
        """A collective its dump knows no completion of (gloo): it ends where its rank issued the next one, the
        latest it can have returned on a rank that waits for each; its rank's last one, at the rank's last record."""
        later = [t for t in self._enqueued.get(s.rank, ()) if t > s.start]
        s.end = min(later) if later else max(self.last_ts.get(s.rank, s.start), s.start)
        s.args["ends"] = "next collective issued" if later else "unfinished: the rank's last record"
        self.out.append(s)

    def _close(self, s: Slice, rec: Record) -> None:
        s.end = rec.ts
        for k, v in _args(rec).items():
            s.args.setdefault(k, v)
        self.out.append(s)

    def _grad_stats(self, rec: Record) -> None:
        stats = {k: v for k, v in rec.fields.items() if k not in (fmt.NODE, fmt.V, "pass")}
        node = str(rec.fields.get(fmt.NODE, ""))
        run = self._last_run.get((rec.rank, node))
        if run is not None:
            run.args.setdefault("grad_stats", []).append(stats)
        else:
            self.out.append(
                Slice("grad_stats", f"grad_stats {node}".strip(), rec.rank, rec.tid, rec.ts, args=_args(rec))
            )

    def finish(self) -> list[Slice]:
        """Every slice; runs never closed end at their rank's last record, marked unfinished."""
        still_open = [s for stack in (*self._nodes.values(), *self._passes.values()) for s in stack]
        for s in still_open + list(self._buckets.values()):
            s.end = max(self.last_ts.get(s.rank, s.start), s.start)
            s.args["unfinished"] = True
            self.out.append(s)
        for s in self._collectives.values():
            self._end_collective(s)
        return self.out


def _args(rec: Record, **extra: Any) -> dict[str, Any]:
    args = {k: v for k, v in rec.fields.items() if k != "v"}
    args.update(extra)
    return args
