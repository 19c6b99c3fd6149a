"""What `diff` reads from the logs, as typed per-rank data: gradient statistics, collectives, parameter
digests, step starts, losses and failures. Everything comes through the public reader; nothing here judges."""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ... import format as fmt
from ...errors import InputError
from ..read import (
    Record,
    Warn,
    after_reading,
    ignore,
    open_sources,
    read_records,
)
from ._entries import Flight, Texts, signature

# Where a signal found a rank's main thread: the watcher's record (blocked in C) or the handler's (in Python).
SIGNAL_MARKS = {fmt.BLOCKED_IN_C: "blocked in C", fmt.IN_PYTHON: "running Python"}
_DP_EVENTS = (
    fmt.ALLREDUCE_BEGIN,
    fmt.ALLREDUCE_END,
    fmt.ALLREDUCE_PARAM,
    fmt.PARAMETER_LAYOUT,
    fmt.PARAMETERS,
    *fmt.FR_EVENTS,
)
WANTED = re.compile(
    b"|".join(p.pattern for p in (fmt.messages_pattern(fmt.GRAD_STATS, *_DP_EVENTS), fmt.texts_pattern(*SIGNAL_MARKS))),
    re.M,
)
_WANTED_WITH_LOSS = re.compile(WANTED.pattern + b"|" + fmt.field_pattern(fmt.LOSS).pattern, re.M)
_COUNTER = re.compile(r"\d+(?=GradNode$)")


@dataclass(slots=True)
class Stat:
    """One `grad_stats` record: a gradient a GradNode took in (`grad_out`) or gave out."""

    rank: int
    step: int
    node: str
    slot: str
    site: str | None
    norm: float
    nan: int
    inf: int
    ts: int
    run: int  # which run of the node on this rank (node name + backward pass)
    checksum: str | None = None  # of the gradient's bytes (guard level >= 6)

    @property
    def op(self) -> str:
        """The node's name without its op counter (multiply3GradNode -> multiplyGradNode): the counter is per
        process, so one extra op on one rank shifts every later name on that rank and none on the others."""
        return _COUNTER.sub("", self.node)

    @property
    def finite(self) -> bool:
        return not (self.nan or self.inf)


@dataclass(slots=True)
class Collective:
    """One allreduce of a bucket on one rank, from its `allreduce begin` to its `allreduce end`."""

    step: int
    bucket: int
    begun_ts: int
    checksum_in: str | None  # this rank's gradients going in
    norm: float  # their L2 norm (NaN: not logged)
    ended_ts: int | None = None  # None: never finished
    checksum_out: str | None = None
    wait_us: int | None = None
    params: dict[str, str] = field(default_factory=dict)  # name -> reduced checksum (verbosity 2)


@dataclass
class Failure:
    """An E or F record."""

    rank: int
    step: int | None
    text: str  # one line
    culprits: list[int] | None  # a DataParallel check names the ranks that caused it


@dataclass
class Signalled:
    """Where a signal (a timeout's SIGTERM, Ctrl-C) found a rank's main thread."""

    rank: int
    signal: str
    state: str  # blocked in C | running Python
    where: str  # file:line


@dataclass
class RankLogs:
    stats: list[Stat] = field(default_factory=list)  # in file order
    collectives: list[Collective] = field(default_factory=list)  # in the order they began
    digests: dict[int, list[str]] = field(default_factory=dict)  # step -> a digest per parameter, as it starts
    final_step: int | None = None  # the step of the digests logged at dv.finalize()
    step_ts: dict[int, int] = field(default_factory=dict)  # step -> when it started (`parameters`)
    losses: dict[int, float] = field(default_factory=dict)  # step -> the last `loss` field logged with it
    names: list[str] = field(default_factory=list)  # the parameters, in the order of the digests
    buckets: list[list[int]] = field(default_factory=list)  # per bucket, its parameters (indices into names)
    last_step: int = -1  # the last step its step-numbered records reach
    failures: list[Failure] = field(default_factory=list)
    signalled: Signalled | None = None
    flight: Flight = field(default_factory=Flight)  # its Flight Recorder entries
    dump: dict[str, Any] | None = None  # its Flight Recorder dump's own record (fields)

    def before(self, stop: int) -> RankLogs:
        """What it holds of the steps before `stop`."""

        def kept(step: int | None) -> bool:
            return step is not None and step < stop

        return RankLogs(
            stats=[s for s in self.stats if kept(s.step)],
            collectives=[c for c in self.collectives if kept(c.step)],
            digests={s: d for s, d in self.digests.items() if kept(s)},
            final_step=self.final_step if kept(self.final_step) else None,
            step_ts={s: ts for s, ts in self.step_ts.items() if kept(s)},
            losses={s: loss for s, loss in self.losses.items() if kept(s)},
            names=self.names,
            buckets=self.buckets,
            last_step=min(self.last_step, stop - 1),
            failures=[f for f in self.failures if kept(f.step)],
            flight=self.flight,
            dump=self.dump,
        )


@dataclass
class Logs:
    ranks: dict[int, RankLogs] = field(default_factory=lambda: defaultdict(RankLogs))
    step_source: str = "step"  # or "logged backward pass": no DataParallel step in the grad_stats
    texts: Texts = field(default_factory=Texts)  # what Flight Recorder entries' codes stand for

    def before(self, stop: int) -> Logs:
        """What the logs hold of the steps before `stop`: a live run's steps that every rank has finished, where
        the checks find what they will find once the run has ended."""
        return Logs(
            defaultdict(RankLogs, {rank: mine.before(stop) for rank, mine in self.ranks.items()}),
            self.step_source,
            self.texts,
        )


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _list(value: Any) -> list:
    """A list field (older renderers wrote it as a JSON string)."""
    if isinstance(value, str) and value[:1] == "[":
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return value if isinstance(value, list) else []


def load(paths: list[str], warn: Warn = ignore, *, losses: bool = False) -> Logs:
    """The records `diff` needs, from every file PATH names; with `losses`, the `loss` fields too (what
    compares two runs; the checks within a run do not read them)."""
    loader = Loader()
    sources = open_sources(paths, warn=warn)
    for source in sources:
        if source.rank is not None:
            loader.logs.ranks[source.rank]  # a rank whose file holds nothing diff reads is still a rank of the run
        if (dump := source.read_flight()) is not None:
            loader.add_dump(source.rank, dump)
    for rec in read_records(sources, where=_WANTED_WITH_LOSS if losses else WANTED, severities="WEF"):
        loader.feed(rec)
    after_reading(sources, warn)
    if not loader.any():
        raise InputError(
            f"{' '.join(paths)}: no gradient statistics (grad_stats, written at verbosity 5: "
            "backward_vlog_guard(5) or DISTVLOG_V=5), no DataParallel records (module parallel at verbosity "
            ">= 1), no Flight Recorder dump and no errors"
        )
    return loader.logs


class Loader:
    """`Logs` built record by record, in each rank's file order: from a finished run (`load`) or a live one
    (`distvlog watch`). Records diff does not read may be fed: they are passed over."""

    def __init__(self) -> None:
        self.logs = Logs()
        self._runs: dict[tuple, int] = {}
        self._passes: dict[int, dict[Any, int]] = defaultdict(dict)  # rank -> pass id -> its number among those logged
        self._open: dict[tuple, Collective] = {}

    def any(self) -> bool:
        """Whether anything diff reads was fed."""
        return any(r.stats or r.collectives or r.digests or r.failures or r.dump for r in self.logs.ranks.values())

    def add_dump(self, rank: int, dump: Any) -> None:
        """A Flight Recorder dump read into columns (`read`'s FlightDump)."""
        mine = self.logs.ranks[rank]
        mine.flight.add_dump(dump, self.logs.texts)
        mine.dump = {k: v for k, v in dump.meta.items() if k not in fmt.CORE_FIELDS}

    def feed(self, rec: Record) -> None:
        logs = self.logs
        mine = logs.ranks[rec.rank]  # (a merged timeline holds several ranks behind one header)
        first = rec.event.partition("\n")[0]
        if first in fmt.FR_EVENTS:  # (before severities: a dump cut short is a W record)
            _flight(mine, rec, first, logs.texts)
        elif rec.severity in "EF":
            mine.failures.append(_failure(rec, first))
        elif rec.severity == "W":
            _signal(mine, rec, first)
        elif first == fmt.GRAD_STATS:
            step = _stat_step(logs, rec, self._passes)
            run = self._runs.setdefault((rec.rank, rec.fields.get("node"), rec.fields.get("pass")), len(self._runs))
            mine.stats.append(_stat(rec, step, run))
            mine.last_step = max(mine.last_step, step)
        elif first in (fmt.ALLREDUCE_BEGIN, fmt.ALLREDUCE_END, fmt.ALLREDUCE_PARAM):
            _collective(mine, rec, first, self._open)
        elif first == fmt.PARAMETERS:
            _parameters(mine, rec)
        elif first == fmt.PARAMETER_LAYOUT:
            mine.names = [str(n) for n in _list(rec.fields.get("names"))]
            mine.buckets = [[i for i in b if isinstance(i, int)] for b in _list(rec.fields.get("buckets"))]
        elif fmt.LOSS in rec.fields:
            _loss(mine, rec)


def _stat_step(logs: Logs, rec: Record, passes: dict[int, dict[Any, int]]) -> int:
    if "step" in rec.fields:
        return _int(rec.fields["step"], -1)
    # no DataParallel: number each rank's logged passes (an unlogged backward takes a pass id too)
    logs.step_source = "logged backward pass"
    return passes[rec.rank].setdefault(rec.fields.get("pass"), len(passes[rec.rank]))


def _stat(rec: Record, step: int, run: int) -> Stat:
    f = rec.fields
    site = f.get("site")
    return Stat(
        rec.rank,
        step,
        str(f.get("node")),
        str(f.get("slot")),
        site if isinstance(site, str) else None,
        _float(f.get("norm")),
        _int(f.get("nan")),
        _int(f.get("inf")),
        rec.ts,
        run,
        str(f["checksum"]) if "checksum" in f else None,
    )


def _collective(mine: RankLogs, rec: Record, event: str, open_collectives: dict[tuple, Collective]) -> None:
    f = rec.fields
    if "step" not in f or "bucket" not in f:
        return
    step, bucket = _int(f["step"]), _int(f["bucket"])
    key = (rec.rank, step, bucket)
    mine.last_step = max(mine.last_step, step)
    if event == fmt.ALLREDUCE_BEGIN:
        checksum = f.get("checksum")
        open_collectives[key] = c = Collective(
            step, bucket, rec.ts, None if checksum is None else str(checksum), _float(f.get("norm"))
        )
        mine.collectives.append(c)
        return
    c = open_collectives.get(key)
    if c is None:  # its begin was not read (a log that starts late): a collective of its own
        c = open_collectives[key] = Collective(step, bucket, rec.ts, None, math.nan)
        mine.collectives.append(c)
    if event == fmt.ALLREDUCE_END:
        c.ended_ts, c.checksum_out = rec.ts, str(f.get("checksum"))
        wait = f.get("wait_us")
        c.wait_us = wait if isinstance(wait, int) else None
    else:
        c.params[str(f.get("param"))] = str(f.get("checksum"))


def _loss(mine: RankLogs, rec: Record) -> None:
    """A `loss` field (NaN too: a diverged run's) of a record logged within a step."""
    step, loss = rec.fields.get("step"), rec.fields[fmt.LOSS]
    if isinstance(step, int) and isinstance(loss, (int, float)) and not isinstance(loss, bool):
        mine.losses[step] = float(loss)


def _flight(mine: RankLogs, rec: Record, event: str, texts: Texts) -> None:
    f = rec.fields
    if event == fmt.FR_DUMP:
        mine.dump = f
        return
    if event == fmt.FR_STARTED:  # (nothing the checks read)
        return
    pg, seq, p2p = texts.code(str(f.get("pg"))), _int(f.get("seq"), -1), f.get("p2p") is True
    if event == fmt.FR_ENQUEUED:
        op, timeout = str(f.get("op")), f.get("timeout_ms")
        sig, site = texts.code(signature(op, f.get("sizes"), f.get("dtypes"))), texts.code(f"{rec.file}:{rec.line}")
        done = f.get("state") == "completed"
        mine.flight.add(pg, seq, sig, texts.code(op), site, rec.ts, _int(timeout), done, p2p)
    else:
        mine.flight.complete(pg, seq, p2p)


def _parameters(mine: RankLogs, rec: Record) -> None:
    step = _int(rec.fields.get("step"), -1)
    if step < 0:
        return
    if rec.fields.get("final") is True:
        mine.final_step = step
    else:
        mine.step_ts.setdefault(step, rec.ts)
        mine.last_step = max(mine.last_step, step)
    digests = _list(rec.fields.get("digests"))
    if digests:
        mine.digests[step] = [str(d) for d in digests]


_TRACEBACK = "Traceback (most recent call last):"
_MODULE_PATH = re.compile(r"^[\w.]+\.(?=\w+(?::|$))")


def error_text(event: str) -> str:
    """What went wrong, in one line: for a logged traceback its exception line without the module path
    (`DataParallelError: parameters are not identical ...`), else the message's first line."""
    lines = event.rstrip().splitlines()
    if _TRACEBACK in lines:
        last = len(lines) - lines[::-1].index(_TRACEBACK)
        exception = next((line for line in lines[last:] if line and not line[0].isspace()), None)
        if exception is not None:
            return _MODULE_PATH.sub("", exception)
    return lines[0].strip() if lines else ""


def _failure(rec: Record, first: str) -> Failure:
    step = rec.fields.get("step")
    if first != fmt.CHECK_FAILED:
        return Failure(rec.rank, step if isinstance(step, int) else None, error_text(rec.event), None)
    # a culprit's record gives the reason, the others' whom they stopped for
    f = rec.fields
    text = str(f["reason"]) if "reason" in f else f"{f.get('check')}: stopped because of {f.get('stopped_by')}"
    culprits = [r for r in _list(f.get("culprits")) if isinstance(r, int)]
    return Failure(rec.rank, step if isinstance(step, int) else None, text, culprits)


def _signal(mine: RankLogs, rec: Record, first: str) -> None:
    for mark, state in SIGNAL_MARKS.items():
        if mark in first and mine.signalled is None:
            mine.signalled = Signalled(rec.rank, first.split(mark)[0].split()[-1], state, f"{rec.file}:{rec.line}")
