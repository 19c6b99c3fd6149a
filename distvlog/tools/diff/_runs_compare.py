"""Run against run, aligned: the records of two runs of one job (read by `load`, as the one-run checks read
them) paired by rank, step and place, and every place where run B's value is not run A's.

Within a step the places come in the order training makes them, so that a first cause comes before its
consequences: the parameters as the step starts, the loss (forward), the gradients of the guarded backward
nodes in the order they ran (a node is known by its op, slot and occurrence within the step, as the
one-run desync check knows it: the counter in its name is the process's), each bucket's local gradients
going into its allreduce, and the allreduce's result.

Runs with another world size train each rank on another shard: their per-rank records (loss, node and
bucket gradients) do not correspond, so only what describes the whole run is compared there: the
parameters, the mean loss over the ranks and the averaged gradients of each bucket.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

from ...wording import ranks_text
from ._logs import Collective, Logs, RankLogs
from ._sequences import _first_difference, _node_runs

PHASES = ("parameters", "loss", "node", "bucket", "reduced")
PARAMETERS, LOSS, NODE, BUCKET, REDUCED = range(len(PHASES))
COUNTED = {
    PARAMETERS: "parameter digests",
    LOSS: "losses",
    NODE: "node gradients",
    BUCKET: "bucket gradients",
    REDUCED: "allreduce results",
}
WHOLE_RUN = -1  # the rank of what describes the whole run (another world size)


class Entry(NamedTuple):
    """One value a run logged at a step: where (`key` pairs it with the other run's), how it is named, what
    must be equal in both runs (a checksum, a digest, a float's repr) and a statistic that says how far
    apart two values are (NaN where the record has none: a digest). A tuple: a run has one per value logged."""

    phase: int
    key: tuple
    name: str
    exact: object
    number: float = math.nan
    site: str | None = None


@dataclass
class Difference:
    """A place where run B's value is not run A's, on `ranks` ([] : the run as a whole)."""

    step: int
    phase: str
    name: str
    ranks: list[int]
    a: float | None  # the statistic in run A (None: no statistic, or not in run A)
    b: float | None
    relative: float | None  # the largest over the ranks of |a - b| / max(|a|, |b|) (None: no statistic)
    site: str | None = None
    only_in: str | None = None  # "A" or "B": the other run has no such value at this step
    position: tuple = ()  # (phase, its index in the step): the order training made them in

    @property
    def where(self) -> str:
        return "the whole run" if not self.ranks else ranks_text(self.ranks)


@dataclass
class GraphDifference:
    """At `step`, `ranks` ran another sequence of backward nodes in run B: node #`position` differs."""

    step: int
    ranks: list[int]
    position: int
    ran_a: str | None  # the node run A ran there (None: its sequence ended)
    ran_b: str | None


@dataclass
class Comparison:
    ranks_a: list[int]
    ranks_b: list[int]
    steps_a: list[int]
    steps_b: list[int]
    per_rank: bool  # False: another world size, the runs compared as wholes
    parameters_of: int = 0  # parameters per digest list (run A's)
    node_checksums: bool = False  # node gradients compared by checksums (guard level 6), not by norms alone
    compared: dict[str, int] = field(default_factory=dict)  # what was compared, per kind of value
    identical_steps: int = 0
    differences: list[Difference] = field(default_factory=list)  # in step, then training order
    graphs: list[GraphDifference] = field(default_factory=list)
    not_compared: list[tuple[str, str]] = field(default_factory=list)  # (what, why)


def relative(a: float, b: float) -> float:
    """|a - b| relative to the larger magnitude; inf where one is not finite and they differ."""
    if a == b or (math.isnan(a) and math.isnan(b)):
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


# -- a run's values ------------------------------------------------------------------------------------------
def _steps(mine: RankLogs) -> set[int]:
    return {*mine.digests, *mine.losses, *(s.step for s in mine.stats), *(c.step for c in mine.collectives)}


def _name(names: list[str], i: int) -> str:
    return names[i] if i < len(names) else f"parameter #{i}"


def _parameters(digests: list[str], names: list[str]) -> list[Entry]:
    return [Entry(PARAMETERS, ("param", i), _name(names, i), d) for i, d in enumerate(digests)]


def _by_step(mine: RankLogs) -> dict[int, list[Collective]]:
    out: dict[int, list[Collective]] = defaultdict(list)
    for c in mine.collectives:
        out[c.step].append(c)
    return out


def _collective_entries(collectives: list[Collective], phases: tuple[int, ...]) -> list[Entry]:
    out, seen = [], defaultdict(int)
    for c in collectives:
        occurrence = seen[c.bucket]
        seen[c.bucket] += 1
        if BUCKET in phases:
            key = ("bucket", c.bucket, occurrence)
            out.append(Entry(BUCKET, key, f"bucket {c.bucket} local gradients", c.checksum_in, c.norm))
        if REDUCED in phases and c.checksum_out is not None:
            out.append(
                Entry(REDUCED, ("reduced", c.bucket, occurrence), f"bucket {c.bucket} allreduce", c.checksum_out)
            )
    return out


def _rank_entries(mine: RankLogs) -> dict[int, list[Entry]]:
    """step -> the rank's values at that step, in training order."""
    nodes: dict[int, list[Entry]] = defaultdict(list)
    seen: dict[tuple, int] = defaultdict(int)
    ops: dict[str, str] = {}  # node name -> op (a regex each: once per name)
    for s in mine.stats:
        op = ops.get(s.node) or ops.setdefault(s.node, s.op)
        occurrence = seen[(s.step, op, s.slot)]
        seen[(s.step, op, s.slot)] += 1
        exact = (s.checksum or s.norm, s.nan, s.inf)  # (a logged norm is finite: NaN and Inf are counted apart)
        nodes[s.step].append(Entry(NODE, ("node", op, s.slot, occurrence), f"{s.node} {s.slot}", exact, s.norm, s.site))
    out, collectives = {}, _by_step(mine)
    for step in _steps(mine):
        loss = (
            [Entry(LOSS, ("loss",), "the loss", repr(mine.losses[step]), mine.losses[step])]
            if step in mine.losses
            else []
        )
        out[step] = [
            *_parameters(mine.digests.get(step, []), mine.names),
            *loss,
            *nodes.get(step, []),
            *_collective_entries(collectives.get(step, []), (BUCKET, REDUCED)),
        ]
    return out


def _run_entries(logs: Logs) -> dict[int, list[Entry]]:
    """step -> what describes the whole run at that step: the parameters and allreduce results of its lowest
    rank that logged them (every rank holds the same), and the mean loss when every rank logged one."""
    ranks = sorted(logs.ranks)
    with_digests = [logs.ranks[r] for r in ranks if logs.ranks[r].digests]
    with_collectives = [logs.ranks[r] for r in ranks if logs.ranks[r].collectives]
    steps = set().union(*(_steps(mine) for mine in logs.ranks.values()))
    collectives = _by_step(with_collectives[0]) if with_collectives else {}
    out = {}
    for step in steps:
        entries = _parameters(with_digests[0].digests.get(step, []), with_digests[0].names) if with_digests else []
        losses = [logs.ranks[r].losses.get(step) for r in ranks]
        if losses and all(loss is not None for loss in losses):
            mean = sum(losses) / len(losses)
            entries.append(Entry(LOSS, ("loss",), "the mean loss over the ranks", repr(mean), mean))
        entries += _collective_entries(collectives.get(step, []), (REDUCED,))
        out[step] = entries
    return out


# -- comparing -------------------------------------------------------------------------------------------------
def _compare_step(
    a: list[Entry], b: list[Entry], counts: dict[int, int]
) -> list[tuple[int, Entry, Entry | None, str | None]]:
    """The places where the two lists of one step differ: (index in training order, entry, the other run's
    or None, which run has it alone or None), run A's in their order, then what only run B has."""
    by_key = {e.key: e for e in b}
    found = []
    for index, e in enumerate(a):
        other = by_key.pop(e.key, None)
        if other is None:
            found.append((index, e, None, "A"))
            continue
        counts[e.phase] += 1
        if other.exact != e.exact:
            found.append((index, e, other, None))
    found += [(len(a) + i, e, None, "B") for i, e in enumerate(by_key.values())]
    return found


def _graphs(logs_a: Logs, logs_b: Logs, ranks: list[int], steps: list[int]) -> list[GraphDifference]:
    """Per step, the ranks whose backward ran another sequence of ops in run B (grouped by what differs)."""
    runs_a, runs_b = _node_runs(logs_a), _node_runs(logs_b)
    found: dict[tuple, GraphDifference] = {}
    for rank in ranks:
        if rank not in runs_a or rank not in runs_b:
            continue
        for step in steps:
            seq_a, seq_b = runs_a[rank].get(step, []), runs_b[rank].get(step, [])
            ops_a, ops_b = tuple(s.op for s in seq_a), tuple(s.op for s in seq_b)
            if ops_a == ops_b:
                continue
            at = _first_difference(ops_a, ops_b)
            ran_a = seq_a[at].node if at < len(seq_a) else None
            ran_b = seq_b[at].node if at < len(seq_b) else None
            found.setdefault((step, at, ran_a, ran_b), GraphDifference(step, [], at, ran_a, ran_b)).ranks.append(rank)
    return sorted(found.values(), key=lambda g: (g.step, g.position))


def compare(logs_a: Logs, logs_b: Logs) -> Comparison:
    """Every value of the two runs paired, and where they differ."""
    ranks_a, ranks_b = sorted(logs_a.ranks), sorted(logs_b.ranks)
    steps_a = sorted(set().union(*(_steps(m) for m in logs_a.ranks.values())))
    steps_b = sorted(set().union(*(_steps(m) for m in logs_b.ranks.values())))
    per_rank = ranks_a == ranks_b
    of = max((len(d) for m in logs_a.ranks.values() for d in m.digests.values()), default=0)
    stats = [s for logs in (logs_a, logs_b) for m in logs.ranks.values() for s in m.stats]
    result = Comparison(
        ranks_a, ranks_b, steps_a, steps_b, per_rank, of, bool(stats) and all(s.checksum for s in stats)
    )
    steps = sorted(set(steps_a) & set(steps_b))
    sides: dict[int, tuple[dict, dict]] = (
        {rank: (_rank_entries(logs_a.ranks[rank]), _rank_entries(logs_b.ranks[rank])) for rank in ranks_a}
        if per_rank
        else {WHOLE_RUN: (_run_entries(logs_a), _run_entries(logs_b))}
    )
    counts: dict[int, int] = defaultdict(int)
    merged: dict[tuple, Difference] = {}
    for step in steps:
        for rank, (entries_a, entries_b) in sides.items():
            for index, e, other, only_in in _compare_step(entries_a.get(step, []), entries_b.get(step, []), counts):
                _merge(merged, step, rank, e, other, only_in, index)
    result.differences = sorted(merged.values(), key=lambda d: (d.step, d.position))
    result.graphs = _graphs(logs_a, logs_b, ranks_a, steps) if per_rank else []
    result.compared = {COUNTED[phase]: n for phase, n in sorted(counts.items())}
    differing = {d.step for d in result.differences} | {g.step for g in result.graphs}
    result.identical_steps = len([s for s in steps if s not in differing])
    result.not_compared = _not_compared(logs_a, logs_b, result)
    return result


def _merge(
    merged: dict[tuple, Difference],
    step: int,
    rank: int,
    e: Entry,
    other: Entry | None,
    only_in: str | None,
    index: int,
) -> None:
    """One place that differs on one rank, folded into the difference at that place on any rank."""
    if other is None:
        a, b = (_number(e), None) if only_in == "A" else (None, _number(e))
        rel = None
    else:
        a, b = _number(e), _number(other)
        rel = None if a is None and b is None else relative(math.nan if a is None else a, math.nan if b is None else b)
    d = merged.setdefault(
        (step, e.key, only_in),
        Difference(step, PHASES[e.phase], e.name, [], a, b, rel, e.site, only_in, (e.phase, index)),
    )
    if rank != WHOLE_RUN:
        d.ranks.append(rank)
    if rel is not None and (d.relative is None or rel > d.relative):
        d.a, d.b, d.relative = a, b, rel
    d.position = min(d.position, (e.phase, index))


def _number(e: Entry) -> float | None:
    return None if math.isnan(e.number) else e.number


def _not_compared(logs_a: Logs, logs_b: Logs, c: Comparison) -> list[tuple[str, str]]:
    """What one run has and the other has not, or what does not correspond between them, and why."""
    out = []
    if not c.per_rank:
        out.append(
            (
                "per-rank losses and local gradients (guarded nodes, buckets)",
                f"run A has {len(c.ranks_a)} ranks, run B {len(c.ranks_b)}: each rank trains on another shard, "
                "so the runs are compared as wholes (parameters, mean loss, allreduce results)",
            )
        )
    for run, steps, other, other_steps in (("B", c.steps_b, "A", c.steps_a), ("A", c.steps_a, "B", c.steps_b)):
        extra = sorted(set(steps) - set(other_steps))
        if extra and other_steps:
            out.append((f"steps {_span(extra)} of run {run}", f"run {other} has no records of them"))
    for what, has in (
        ("node gradients", lambda m: m.stats),
        ("bucket gradients and allreduce results", lambda m: m.collectives),
        ("parameters", lambda m: m.digests),
        ("losses", lambda m: m.losses),
    ):
        in_a = any(has(m) for m in logs_a.ranks.values())
        in_b = any(has(m) for m in logs_b.ranks.values())
        if in_a != in_b:
            out.append((what, f"only run {'A' if in_a else 'B'} logged them{_WHY_MISSING[what]}"))
    return out


_WHY_MISSING = {
    "node gradients": " (grad_stats: backward_vlog_guard(5) or DISTVLOG_V=5)",
    "bucket gradients and allreduce results": " (DataParallel at verbosity >= 1 of module parallel)",
    "parameters": " (DataParallel at verbosity >= 1 of module parallel)",
    "losses": " (a `loss` field in a record logged within a step)",
}


def _span(steps: list[int]) -> str:
    return str(steps[0]) if len(steps) == 1 else f"{steps[0]}-{steps[-1]}"
