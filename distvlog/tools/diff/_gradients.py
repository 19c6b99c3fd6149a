"""Checks on gradient values: where NaN/Inf starts and how it spreads, a rank's gradient exploding, and (as
notes) local gradient norms far from the peers' or the rank's own history.

Local gradients differ across ranks before the allreduce (each rank has its own mini-batch: with 16 ranks
and small batches, by 10x and more on healthy runs), so only what healthy runs never reach is an error,
and a gradient that is small is never one (see `_thresholds`)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from . import _thresholds as T
from ._findings import Explosion, NanArrival, NanOrigin, NormNote
from ._logs import Logs, Stat


# -- NaN/Inf --------------------------------------------------------------------------------------------------
def nan_origins(logs: Logs) -> list[NanOrigin | NanArrival]:
    """Per rank, where each stretch of steps with non-finite gradients starts, earliest first: the first
    non-finite gradient wins, as everything after it on that rank may be its consequence; a step whose
    gradients are all finite ends the stretch, so a later, unrelated NaN on the same rank is found too.
    NaN/Inf a rank first shows right after an allreduce that another rank's NaN/Inf went into arrived
    through it (one NanArrival per allreduce and step)."""
    found: list[NanOrigin] = []
    for stats in (r.stats for r in logs.ranks.values()):
        incoming: dict[int, bool] = {}  # run -> its grad_out was finite
        first_bad: dict[int, NanOrigin] = {}  # step -> its first non-finite gradient
        steps: dict[int, None] = {}  # the rank's steps, in order
        for s in stats:
            steps[s.step] = None
            if s.slot == "grad_out":
                incoming[s.run] = s.finite
            if not s.finite and s.step not in first_bad:
                # an origin turned finite gradients into NaN/Inf; else it came from outside the logged region
                how = "origin" if s.slot != "grad_out" and incoming.get(s.run, False) else "first seen"
                first_bad[s.step] = NanOrigin(s.step, how, s.rank, s.node, s.slot, s.site, s.nan, s.inf, s.ts)
        previous_bad = False
        for step in steps:
            if step in first_bad and not previous_bad:
                found.append(first_bad[step])
            previous_bad = step in first_bad
    found.sort(key=lambda o: (o.step, o.ts))
    return _arrivals(found, logs)


def _arrivals(found: list[NanOrigin], logs: Logs) -> list[NanOrigin | NanArrival]:
    steps = {rank: sorted({s.step for s in r.stats}) for rank, r in logs.ranks.items()}
    reduced = {c.step for r in logs.ranks.values() for c in r.collectives}
    sources: list[NanOrigin] = []
    arrivals: dict[tuple, NanArrival] = {}
    for o in found:  # earliest first
        before = [step for step in steps[o.rank] if step < o.step]
        since = before[-1] if before else -math.inf  # the rank logged no step between this one and S
        causes = [c for c in sources if c.rank != o.rank and since <= c.step < o.step and c.step in reduced]
        if not causes:
            sources.append(o)
            continue
        step = max(c.step for c in causes)
        from_ranks = sorted({c.rank for c in causes if c.step == step})
        arrival = arrivals.setdefault((step, tuple(from_ranks), o.step), NanArrival(o.step, [], step, from_ranks))
        arrival.ranks.append(o.rank)
    return [*sources, *arrivals.values()]


# -- norms ----------------------------------------------------------------------------------------------------
@dataclass
class Point:
    """A rank's norm of one gradient (a bucket's, or a node's slot) at one step, and what it is judged by."""

    rank: int
    step: int
    where: str
    norm: float
    peers: float | None  # the largest of the other ranks' norms at this step
    history: float | None  # the largest norm of any rank before this step (None: fewer than MIN_HISTORY steps)
    peers_median: float | None  # the other ranks' median at this step (for notes about spread)
    site: str | None = None
    stat: Stat | None = None

    @property
    def above(self) -> float:
        """How many times the largest norm this gradient had anywhere before, or on any peer now: healthy
        gradients shrink as training goes, and a batch that is harder than the others gives a rank a larger
        gradient than its peers, but never orders of magnitude beyond everything seen so far."""
        reference = max(self.peers or 0.0, self.history or 0.0)
        return self.norm / reference if reference > 0 and math.isfinite(self.norm) else 1.0

    def exploded(self) -> bool:
        return self.peers is not None and self.above > T.EXPLOSION


# Norm series: key -> rank -> step -> (norm, site, stat).
Series = dict[tuple, dict[int, dict[int, tuple[float, str | None, Stat | None]]]]


def series(logs: Logs, since: int | None = None) -> Series:
    """The norm series of the steps from `since` on. Keys: each bucket's local gradient (at DataParallel's
    verbosity 1) and each guarded node's gradients (grad_stats), aligned across ranks by op without its
    counter, slot and occurrence within the step."""
    out: Series = defaultdict(lambda: defaultdict(dict))
    for rank, mine in logs.ranks.items():
        for c in mine.collectives:
            if math.isfinite(c.norm) and (since is None or c.step >= since):
                out[("bucket", c.bucket)][rank].setdefault(c.step, (c.norm, None, None))
        seen: dict[tuple, int] = defaultdict(int)
        for s in mine.stats:
            if since is not None and s.step < since:
                continue
            key = (s.step, s.op, s.slot)
            seen[key] += 1
            if s.finite and math.isfinite(s.norm):
                out[("node", s.op, s.slot, seen[key] - 1)][rank][s.step] = (s.norm, s.site, s)
    return out


# What the norms of earlier steps leave for the later ones' judgement: per series, its largest norm and steps.
History = dict[tuple, tuple[float, int]]


def points(logs: Logs, norms: Series, history: History | None = None) -> Iterator[Point]:
    """Every norm of the series (of the logs), with what it is judged by: with `history`, the norms of the
    steps before the series' too."""
    for key, per_rank in norms.items():
        steps = sorted({step for by_step in per_rank.values() for step in by_step})
        names = _bucket_names(logs, key[1]) if key[0] == "bucket" else None
        largest_before, seen_before = (history or {}).get(key, (0.0, 0))
        for seen_steps, step in enumerate(steps, seen_before):
            now = {rank: by_step[step] for rank, by_step in per_rank.items() if step in by_step}
            for rank, (norm, site, stat) in now.items():
                others = [o[0] for r, o in now.items() if r != rank]
                yield Point(
                    rank,
                    step,
                    names if names is not None else f"{stat.node} {stat.slot}",
                    norm,
                    max(others) if others else None,
                    largest_before if seen_steps >= T.MIN_HISTORY else None,
                    statistics.median(others) if others else None,
                    site,
                    stat,
                )
            largest_before = max(largest_before, *(v[0] for v in now.values()))


def history(norms: Series, before: History) -> History:
    """`before` and the series' norms (of the steps after its): what `points` of later steps needs."""
    out = dict(before)
    for key, per_rank in norms.items():
        largest, seen = out.get(key, (0.0, 0))
        values = [value[0] for by_step in per_rank.values() for value in by_step.values()]
        out[key] = (max(largest, *values), seen + len({step for by_step in per_rank.values() for step in by_step}))
    return out


def _bucket_names(logs: Logs, bucket: int) -> str:
    """`bucket 0 (linear_2.w_0, linear_2.b_0)`, from the parameter layout of the lowest rank that logged it."""
    for _, mine in sorted(logs.ranks.items()):
        if mine.names and bucket < len(mine.buckets):
            names = [mine.names[i] for i in mine.buckets[bucket] if i < len(mine.names)]
            return f"bucket {bucket} ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})"
    return f"bucket {bucket}"


def explosions(all_points: list[Point]) -> list[Explosion]:
    """One finding per rank and stretch of consecutive steps whose gradients exploded: the bucket with the
    largest norm, and the first guarded node where it shows (its incoming gradient was not yet exploded)."""
    exploded: dict[tuple[int, int], list[Point]] = defaultdict(list)  # (rank, step) -> its exploded points
    for p in all_points:
        if p.exploded():
            exploded[(p.rank, p.step)].append(p)
    found: list[Explosion] = []
    last: dict[int, int] = {}  # rank -> the last step of its current stretch
    for (rank, step), hits in sorted(exploded.items()):
        if last.get(rank) == step - 1:
            last[rank] = step
            continue
        last[rank] = step
        top = max([p for p in hits if p.stat is None] or hits, key=lambda p: p.above)  # a bucket's, if one exploded
        origin, seen = _explosion_origin(hits)
        found.append(
            Explosion(
                step,
                rank,
                top.where,
                origin.site if origin else top.site,
                top.norm,
                top.peers or 0.0,
                top.history,
                f"{origin.stat.node} {origin.stat.slot}" if origin else None,
                seen,
            )
        )
    return found


def _explosion_origin(hits: list[Point]) -> tuple[Point | None, bool]:
    """(the first guarded node, in backward order, whose outgoing gradient exploded while the one it took in
    had not, False); else (the first exploded gradient logged, True: where it was first seen)."""
    nodes = sorted((p for p in hits if p.stat is not None), key=lambda p: p.stat.run)  # (runs count up in log order)
    exploded_runs = {p.stat.run for p in nodes if p.stat.slot == "grad_out"}
    for p in nodes:
        if p.stat.slot != "grad_out" and p.stat.run not in exploded_runs:
            return p, False
    return (nodes[0], True) if nodes else (None, False)


def spike_notes(all_points: list[Point]) -> list[NormNote]:
    """Per rank, its gradient furthest above everything seen before and its peers, of those beyond
    NOTE_SPIKE that are no explosion, and at how many steps it was so."""
    furthest: dict[int, Point] = {}
    steps: dict[int, set[int]] = defaultdict(set)
    for p in all_points:
        if p.peers is not None and T.NOTE_SPIKE < p.above <= T.EXPLOSION:
            steps[p.rank].add(p.step)
            if p.rank not in furthest or p.above > furthest[p.rank].above:
                furthest[p.rank] = p
    return [
        NormNote(p.step, rank, p.where, p.norm, max(p.peers or 0.0, p.history or 0.0), len(steps[rank]))
        for rank, p in sorted(furthest.items())
    ]


def largest(all_points: list[Point]) -> dict[str, float]:
    """The statistics the thresholds judge, at their largest over these logs (what `_thresholds` was set from),
    and how far apart healthy local gradients can be (either way, from the peers' median): why a gradient
    far below its peers' is no fault."""
    above = spread = 1.0
    for p in all_points:
        if p.peers is not None:
            above = max(above, p.above)
        if p.peers_median and p.norm > 0 and math.isfinite(p.norm):
            spread = max(spread, p.norm / p.peers_median, p.peers_median / p.norm)
    return {"explosion": above, "spread_from_peers": spread}
