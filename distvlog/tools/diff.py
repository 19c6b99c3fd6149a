"""`distvlog diff PATH... [--json]`: where ranks diverged, from the per-rank logs alone.

Reads the `grad_stats` records the backward engine writes at level >= 5 (one per gradient a node takes
in or gives out), DataParallel's `allreduce` records and E/F records, aligns them across ranks by step
(without DataParallel: each rank's logged backward passes in order), op (the node name without its
per-process counter) and slot, and reports, in order of usefulness:

- the first NaN/Inf origin: the node whose incoming gradient was finite but an outgoing one was not
  (rank, step, node, slot, forward file:line), earliest by step then clock-corrected time;
- errors: E and F records (an unhandled exception, DataParallel's debug checks), by rank and step;
- desync: ranks whose backward ran a different node sequence in a step than the other ranks;
- collectives: allreduces whose result differs across ranks, or that some rank began and never finished;
- log ends: ranks whose logs stop at an earlier step than the others' (killed, hung, records lost);
- outliers: a rank whose gradient norm is more than `--outlier-factor` times off a majority of ranks
  (it takes 3 or more).

Exit 0 when nothing is found (the report names any check the logs could not support), 1 when something is
found, 2 on unusable input (also: logs on which no check can run).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import orjson

from .. import format as fmt
from ..errors import InputError
from ..wording import plural, ranks_text
from .read import Warn, after_reading, ignore, open_sources, read_records, warner

_WANTED = fmt.messages_pattern(fmt.GRAD_STATS, fmt.ALLREDUCE_BEGIN, fmt.ALLREDUCE_END, fmt.ALLREDUCE_PARAM)
MAX_LISTED = 10
_COUNTER = re.compile(r"\d+(?=GradNode$)")


@dataclass
class Stat:
    """One `grad_stats` record."""

    rank: int
    step: int
    node: str
    slot: str
    site: str | None
    norm: float
    nan: int
    inf: int
    ts: int
    run: int  # which run of the node on this rank (node name + pass)

    @property
    def op(self) -> str:
        """The node's name without its op counter (multiply3GradNode -> multiplyGradNode): the counter is per
        process, so one extra op on one rank shifts every later name on that rank and none on the others."""
        return _COUNTER.sub("", self.node)

    @property
    def finite(self) -> bool:
        return not (self.nan or self.inf)


@dataclass
class Logs:
    stats: dict[int, list[Stat]] = field(default_factory=lambda: defaultdict(list))  # per rank, in file order
    begun: dict[tuple, set[int]] = field(default_factory=lambda: defaultdict(set))  # (step, bucket) -> ranks
    ended: dict[tuple, dict[int, str]] = field(default_factory=lambda: defaultdict(dict))  # -> rank: checksum
    params: dict[tuple, dict[int, str]] = field(default_factory=lambda: defaultdict(dict))  # (step, b, param)
    errors: dict[tuple, list[int]] = field(default_factory=lambda: defaultdict(list))  # (step, message) -> ranks
    ranks: set[int] = field(default_factory=set)
    last_step: dict[int, int] = field(default_factory=dict)  # rank -> the last step its grad_stats/allreduces reach
    step_source: str = "step"


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) else default


def _float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else math.nan


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


def load(paths: list[str], warn: Warn = ignore) -> Logs:
    """The records `diff` needs, from every file PATH names."""
    logs = Logs()
    sources = open_sources(paths, warn=warn)
    logs.ranks = {s.rank for s in sources if s.rank is not None}
    runs: dict[tuple, int] = {}
    passes: dict[int, dict[Any, int]] = defaultdict(dict)  # rank -> pass id -> its number among the rank's logged
    for rec in read_records(sources, where=_WANTED, severities="EF"):
        logs.ranks.add(rec.rank)  # a merged timeline holds several ranks behind one header
        f = rec.fields
        if rec.severity in "EF":
            step = f.get("step")
            logs.errors[(step if isinstance(step, int) else None, error_text(rec.event))].append(rec.rank)
        elif rec.event.startswith(fmt.GRAD_STATS):
            if "step" in f:
                step = _int(f["step"], -1)
            else:  # no DataParallel: number each rank's logged passes, as an unlogged backward takes a pass id too
                logs.step_source = "logged backward pass"
                step = passes[rec.rank].setdefault(f.get("pass"), len(passes[rec.rank]))
            logs.last_step[rec.rank] = max(step, logs.last_step.get(rec.rank, step))
            run_key = (rec.rank, f.get("node"), f.get("pass"))
            run = runs.setdefault(run_key, len(runs))
            logs.stats[rec.rank].append(
                Stat(
                    rec.rank,
                    step,
                    str(f.get("node")),
                    str(f.get("slot")),
                    f.get("site"),
                    _float(f.get("norm")),
                    _int(f.get("nan")),
                    _int(f.get("inf")),
                    rec.ts,
                    run,
                )
            )
        elif "bucket" in f and "step" in f:
            key = (_int(f["step"]), _int(f["bucket"]))
            logs.last_step[rec.rank] = max(key[0], logs.last_step.get(rec.rank, key[0]))
            if rec.event.startswith(fmt.ALLREDUCE_BEGIN):
                logs.begun[key].add(rec.rank)
            elif rec.event.startswith(fmt.ALLREDUCE_END):
                logs.ended[key][rec.rank] = str(f.get("checksum"))
            elif "param" in f:
                logs.params[key + (str(f["param"]),)][rec.rank] = str(f.get("checksum"))
    after_reading(sources, warn)
    if not logs.stats and not logs.begun and not logs.errors:
        raise InputError(
            f"{' '.join(paths)}: no gradient statistics (grad_stats, written at verbosity 5: "
            "backward_vlog_guard(5) or DISTVLOG_V=5), no allreduce records (DataParallel at v>=1) "
            "and no errors"
        )
    return logs


# -- the checks ----------------------------------------------------------------------------------------
def nan_origins(logs: Logs) -> list[dict]:
    """Per rank, where each stretch of steps with non-finite gradients starts, earliest first: the first
    non-finite gradient wins, as everything after it on that rank may be its consequence; a step whose
    gradients are all finite ends the stretch, so a later, unrelated NaN on the same rank is reported too."""
    found = []
    for stats in logs.stats.values():
        incoming: dict[int, bool] = {}  # run -> its grad_out was finite
        first_bad: dict[int, dict] = {}  # step -> its first non-finite gradient
        steps: dict[int, None] = {}  # the rank's steps, in order
        for s in stats:
            steps[s.step] = None
            if s.slot == "grad_out":
                incoming[s.run] = s.finite
            if not s.finite and s.step not in first_bad:
                # an origin turned finite gradients into NaN/Inf; else it came from outside the logged region
                first_bad[s.step] = _origin(
                    s, "origin" if s.slot != "grad_out" and incoming.get(s.run, False) else "first seen"
                )
        previous_bad = False
        for step in steps:
            if step in first_bad and not previous_bad:
                found.append(first_bad[step])
            previous_bad = step in first_bad
    found.sort(key=lambda o: (o["step"], o["ts"]))
    _mark_arrivals(found, logs)
    return found


def _mark_arrivals(found: list[dict], logs: Logs) -> None:
    """Kind 'after allreduce' for NaN/Inf a rank first shows in the first step it logged after an allreduce
    (step S) that another rank's NaN/Inf of step S went into: the averaged gradients carried it over."""
    steps = {rank: sorted({s.step for s in stats}) for rank, stats in logs.stats.items()}
    reduced = {step for step, _ in logs.begun.keys() | logs.ended.keys()}
    sources: list[dict] = []
    for o in found:  # earliest first
        before = [step for step in steps[o["rank"]] if step < o["step"]]
        since = before[-1] if before else -math.inf  # the rank logged no step between this one and S
        causes = [
            c for c in sources if c["rank"] != o["rank"] and since <= c["step"] < o["step"] and c["step"] in reduced
        ]
        if causes:
            step = max(c["step"] for c in causes)
            o.update(
                kind="after allreduce",
                allreduce_step=step,
                from_ranks=sorted({c["rank"] for c in causes if c["step"] == step}),
            )
        else:
            sources.append(o)


def _origin(s: Stat, kind: str) -> dict:
    return {
        "kind": kind,
        "rank": s.rank,
        "step": s.step,
        "node": s.node,
        "slot": s.slot,
        "site": s.site,
        "nan": s.nan,
        "inf": s.inf,
        "ts": s.ts,
    }


def _sequences(logs: Logs) -> dict[int, dict[int, list[Stat]]]:
    """rank -> step -> the nodes it ran, in order (a Stat of each)."""
    seqs: dict[int, dict[int, list[Stat]]] = defaultdict(lambda: defaultdict(list))
    for rank, stats in logs.stats.items():
        last_run = None
        for s in stats:
            if s.run != last_run:
                seqs[rank][s.step].append(s)
                last_run = s.run
    return seqs


def errors(logs: Logs) -> list[dict]:
    """E and F records, one entry per (step, message) with the ranks that logged it: DataParallel's checks
    raise the same error on every rank."""
    found = [
        {"ranks": sorted(set(ranks)), "step": step, "message": message}
        for (step, message), ranks in logs.errors.items()
    ]
    return sorted(found, key=lambda e: (e["step"] is None, e["step"] or 0, e["ranks"][0]))


def log_ends(logs: Logs) -> list[dict]:
    """Ranks whose logs stop at an earlier step than the others' (killed, hung, or their last records never
    written), grouped by the step they stop at. Desync leaves the steps a rank's logs never reach alone."""
    if not logs.last_step:
        return []
    end = max(logs.last_step.values())
    stopped: dict[int, list[int]] = defaultdict(list)
    for rank, step in sorted(logs.last_step.items()):
        stopped[step].append(rank)
    return [
        {"ranks": ranks, "step": step, "others": stopped[end], "others_step": end}
        for step, ranks in sorted(stopped.items())
        if step < end
    ]


def _stops_in(logs: Logs, rank: int, step: int) -> bool:
    """Whether the rank's logs stop inside this step: its last, and either others' logs go further or the
    rank never finished all of the step's allreduces (without those, the last step of a run is complete)."""
    if logs.last_step[rank] != step:
        return False
    return step < max(logs.last_step.values()) or any(
        key[0] == step and rank not in logs.ended.get(key, {}) for key in logs.begun.keys() | logs.ended.keys()
    )


def _cut_short(seq: tuple, other: tuple, ranks: list[int], step: int, logs: Logs) -> bool:
    """Whether `seq` is `other` with its end missing because the logs of `ranks` stop in this step."""
    return len(seq) < len(other) and other[: len(seq)] == seq and all(_stops_in(logs, r, step) for r in ranks)


def desync(logs: Logs) -> list[dict]:
    """For each rank that ran a different backward than the majority: its first differing step. When no
    majority says which is odd (2 ranks, a 2-2 split), one entry per split naming every side."""
    seqs = _sequences(logs)
    steps = sorted({step for per_rank in seqs.values() for step in per_rank})
    out: dict[Any, dict] = {}  # rank (or the split's groups) -> its entry
    for step in steps:
        groups: dict[tuple, list[int]] = defaultdict(list)  # ops run -> ranks
        for rank in sorted(seqs):
            if logs.last_step[rank] >= step:  # a rank whose logs end earlier is no evidence of a different graph
                groups[tuple(s.op for s in seqs[rank].get(step, ()))].append(rank)
        # the start of another's sequence, cut short because these ranks' logs stop here, agrees with it
        ordered = sorted(
            (
                (seq, ranks)
                for seq, ranks in groups.items()
                if not any(_cut_short(seq, other, ranks, step, logs) for other in groups)
            ),
            key=lambda kv: (-len(kv[1]), kv[1][0]),
        )
        if len(ordered) < 2:
            continue
        reference, ref_ranks = ordered[0]
        if len(ordered[1][1]) == len(ref_ranks):  # no majority
            key = tuple(tuple(ranks) for _, ranks in ordered)
            if key not in out:
                at = min(_first_difference(seq, reference) for seq, _ in ordered[1:])
                out[key] = {
                    "kind": "no majority",
                    "ranks": sorted(r for _, ranks in ordered for r in ranks),
                    "step": step,
                    "position": at,
                    "steps": 0,
                    "groups": [
                        {"ranks": ranks, "ran": _node_at(seqs[ranks[0]][step], at), "nodes": len(seq)}
                        for seq, ranks in ordered
                    ],
                }
            out[key]["steps"] += 1
            continue
        for seq, members in ordered[1:]:
            for rank in members:
                if rank not in out:
                    at = _first_difference(seq, reference)
                    out[rank] = {
                        "kind": "odd rank",
                        "rank": rank,
                        "step": step,
                        "position": at,
                        "ran": _node_at(seqs[rank][step], at),
                        "others_ran": _node_at(seqs[ref_ranks[0]][step], at),
                        "nodes": len(seq),
                        "others_nodes": len(reference),
                        "others": ref_ranks,
                        "steps": 0,
                    }
                out[rank]["steps"] += 1
    return sorted(out.values(), key=lambda d: (d["step"], d.get("rank", -1)))


def _first_difference(seq: tuple, other: tuple) -> int:
    return next((i for i, (a, b) in enumerate(zip(seq, other)) if a != b), min(len(seq), len(other)))


def _node_at(nodes: list[Stat], i: int) -> str | None:
    """The real name (counter included) of the i-th node run, as the rank's log spells it."""
    return nodes[i].node if i < len(nodes) else None


def collectives(logs: Logs) -> list[dict]:
    """Allreduces whose results differ across ranks, or that not every rank finished: some began it and never
    finished, some never began it (of the ranks that log allreduces at all)."""
    out = []
    keys = set(logs.begun) | set(logs.ended)
    reducing = set().union(*logs.begun.values(), *(e.keys() for e in logs.ended.values()))
    for key in sorted(keys):
        step, bucket = key
        begun, ended = logs.begun.get(key, set()), logs.ended.get(key, {})
        not_finished, not_begun = sorted(begun - set(ended)), sorted(reducing - begun - set(ended))
        if not_finished or not_begun:
            out.append(
                {
                    "kind": "unfinished",
                    "step": step,
                    "bucket": bucket,
                    "began": sorted(begun),
                    "not_finished": not_finished,
                    "not_begun": not_begun,
                }
            )
        values = defaultdict(list)
        for rank, checksum in ended.items():
            values[checksum].append(rank)
        if len(values) > 1:
            params = sorted(
                p for (s, b, p), per_rank in logs.params.items() if (s, b) == key and len(set(per_rank.values())) > 1
            )
            out.append(
                {
                    "kind": "mismatch",
                    "step": step,
                    "bucket": bucket,
                    "checksums": {c: sorted(r) for c, r in values.items()},
                    "params": params,
                }
            )
    return out


def _apart(a: float, b: float) -> float:
    """How many times apart two norms are (1 when both are about zero)."""
    low, high = sorted((a, b))
    return 1.0 if high <= 1e-30 else high / low if low else math.inf


def outliers(logs: Logs, factor: float) -> list[dict]:
    """Gradients (aligned by step, op, slot, occurrence) whose norm is more than `factor` times off those of
    a majority of ranks. Sorted norms cut where neighbours are more than `factor` apart form clusters; when
    no cluster holds a majority (a 2-2 split) nothing says which side is off: one 'split' entry names both.
    Otherwise every rank more than `factor` off the majority cluster's median is an outlier."""
    aligned: dict[tuple, dict[int, Stat]] = defaultdict(dict)
    for rank, stats in logs.stats.items():
        seen: dict[tuple, int] = defaultdict(int)
        for s in stats:
            key = (s.step, s.op, s.slot)
            aligned[key + (seen[key],)][rank] = s
            seen[key] += 1
    out = []
    for (step, _, slot, _), per_rank in aligned.items():
        norms = sorted((s.norm, r) for r, s in per_rank.items() if s.finite and not math.isnan(s.norm))
        if len(norms) < 3:
            continue
        clusters = [[norms[0]]]
        for (low, _), (high, rank) in zip(norms, norms[1:]):
            if _apart(low, high) > factor:
                clusters.append([])
            clusters[-1].append((high, rank))
        first = per_rank[norms[0][1]]
        majority = max(clusters, key=len)
        if 2 * len(majority) <= len(norms):
            out.append(
                {
                    "kind": "split",
                    "step": step,
                    "node": first.node,
                    "slot": slot,
                    "site": first.site,
                    "ratio": _apart(norms[0][0], norms[-1][0]),
                    "groups": [{"ranks": sorted(r for _, r in c), "norms": [c[0][0], c[-1][0]]} for c in clusters],
                }
            )
            continue
        # Every rank is judged by the majority's median: a chain of small steps can join a cluster to one far off.
        median = statistics.median(n for n, _ in majority)
        off = [(norm, rank) for norm, rank in norms if _apart(norm, median) > factor]
        others = sorted({rank for _, rank in majority} - {rank for _, rank in off})
        for norm, rank in off:
            out.append(
                {
                    "kind": "outlier",
                    "rank": rank,
                    "step": step,
                    "node": per_rank[rank].node,
                    "slot": slot,
                    "norm": norm,
                    "median": median,
                    "others": others,
                    "ratio": _apart(norm, median),
                    "site": per_rank[rank].site,
                }
            )
    return sorted(out, key=lambda o: (o["step"], -o["ratio"]))


# -- the report ----------------------------------------------------------------------------------------
def not_checked(logs: Logs) -> list[dict]:
    """The checks these logs cannot support, and why: finding nothing there does not mean clean."""
    if not logs.stats:
        return [
            {
                "checks": ["NaN/Inf origins", "desync", "outliers"],
                "why": "no grad_stats records (the backward writes them at verbosity >= 5: backward_vlog_guard(5) "
                "or DISTVLOG_V=5)",
            }
        ]
    if len(logs.stats) < 3:
        return [
            {
                "checks": ["outliers"],
                "why": f"grad_stats from {plural(len(logs.stats), 'rank')} only: it takes "
                "3 or more to tell which one is off",
            }
        ]
    return []


def analyse(logs: Logs, factor: float) -> dict:
    """All checks; `found` when any reports something, `clean` only when nothing is found and all could run."""
    origins = nan_origins(logs)
    report = {
        "ranks": sorted(logs.ranks),
        "steps_from": logs.step_source,
        "grad_stats": sum(len(s) for s in logs.stats.values()),
        "allreduces": len(logs.ended),
        "nan_origin": next((o for o in origins if o["kind"] != "after allreduce"), None),
        "nan_origins": origins,
        "errors": errors(logs),
        "desync": desync(logs),
        "collectives": collectives(logs),
        "log_ends": log_ends(logs),
        "outliers": outliers(logs, factor),
        "not_checked": not_checked(logs),
    }
    report["found"] = any(report[k] for k in ("nan_origins", "errors", "desync", "collectives", "log_ends", "outliers"))
    report["clean"] = not report["found"] and not report["not_checked"]
    return report


def _where(d: dict) -> str:
    return f" (forward at {d['site']})" if d.get("site") else ""


def _step(step: int | None) -> str:
    return "" if step is None else f" step {step}"


def _limited(lines: list[str]) -> list[str]:
    """At most MAX_LISTED lines of one kind, then how many more there are (the JSON has them all)."""
    return lines[:MAX_LISTED] + ([f"  ... {len(lines) - MAX_LISTED} more"] if len(lines) > MAX_LISTED else [])


ALIGNED_BY = {"step": "step", "logged backward pass": "each rank's logged backward passes, counted from 0"}


def _unfinished_lines(unfinished: list[dict]) -> list[str]:
    """One line per step and outcome, naming its buckets: a rank stuck in a step leaves them all alike."""
    buckets: dict[tuple, list[int]] = defaultdict(list)
    for c in unfinished:
        buckets[(c["step"], tuple(c["not_finished"]), tuple(c["not_begun"]))].append(c["bucket"])
    lines = []
    for (step, not_finished, not_begun), numbers in buckets.items():
        it = "them" if len(numbers) > 1 else "it"
        what = [f"{ranks_text(not_finished)} began {it} and never finished"] if not_finished else []
        what += [f"{ranks_text(not_begun)} never began {it}"] if not_begun else []
        lines.append(
            f"allreduce step {step} bucket{'s' if len(numbers) > 1 else ''} {','.join(map(str, numbers))}: "
            + "; ".join(what)
        )
    return lines


def _nan_lines(origins: list[dict]) -> list[str]:
    """One line per origin; NaN/Inf that arrived through an allreduce: one line per allreduce and step."""
    lines: list[str] = []
    arrivals: dict[tuple, tuple[int, list[int]]] = {}  # (allreduce step, from ranks, step) -> (line, ranks)
    for o in origins:
        if o["kind"] == "after allreduce":
            key = (o["allreduce_step"], tuple(o["from_ranks"]), o["step"])
            if key not in arrivals:
                arrivals[key] = (len(lines), [])
                lines.append("")
            arrivals[key][1].append(o["rank"])
            continue
        note = "" if o["kind"] == "origin" else " (already non-finite where logging starts: its producer is not logged)"
        lines.append(
            f"NaN/Inf {o['kind']}: rank {o['rank']} step {o['step']} {o['node']} {o['slot']}{_where(o)}: "
            f"{o['nan']} NaN, {o['inf']} Inf{note}"
        )
    for (reduced, sources, step), (i, ranks) in arrivals.items():
        lines[i] = (
            f"NaN/Inf on {ranks_text(ranks)} from step {step}: arrived through the allreduce of step {reduced} "
            f"from {ranks_text(sources)}"
        )
    return [("" if i == 0 else "  then ") + line for i, line in enumerate(lines)]


def _desync_line(d: dict) -> str:
    steps = f"({d['steps']} step{' differs' if d['steps'] == 1 else 's differ'})"
    if d["kind"] == "no majority":
        named = all(g["ran"] for g in d["groups"])
        sides = ", ".join(
            f"{ranks_text(g['ranks'])} ran {g['ran'] if named else str(g['nodes']) + ' nodes'}" for g in d["groups"]
        )
        return (
            f"desync: {ranks_text(d['ranks'])} differ at step {d['step']} node #{d['position']}, no majority says "
            f"which is off: {sides} {steps}"
        )
    what = (
        f"ran {d['ran']} where {ranks_text(d['others'])} ran {d['others_ran']}"
        if d["ran"] and d["others_ran"]
        else f"ran {d['nodes']} nodes where {ranks_text(d['others'])} ran {d['others_nodes']}"
    )
    return f"desync: rank {d['rank']} step {d['step']} node #{d['position']}: {what} {steps}"


def _mismatch_line(c: dict) -> str:
    groups = sorted(c["checksums"].values(), key=len, reverse=True)
    params = f" (parameters {', '.join(c['params'])})" if c["params"] else ""
    return (
        f"allreduce step {c['step']} bucket {c['bucket']}: result differs on "
        f"{ranks_text(r for g in groups[1:] for r in g)} from {ranks_text(groups[0])}{params}"
    )


def _outlier_lines(found: list[dict]) -> list[str]:
    """One line per rank and step (or split and step), for its gradient furthest off, with how many more."""
    first: dict[tuple, dict] = {}
    count: dict[tuple, int] = defaultdict(int)
    for o in found:  # furthest off first within a step
        key = (o["step"], o["rank"] if o["kind"] == "outlier" else tuple(tuple(g["ranks"]) for g in o["groups"]))
        first.setdefault(key, o)
        count[key] += 1
    lines = []
    for key, o in first.items():
        more = f" (and {plural(count[key] - 1, 'more gradient')} there)" if count[key] > 1 else ""
        if o["kind"] == "outlier":
            lines.append(
                f"outlier: rank {o['rank']} step {o['step']} {o['node']} {o['slot']}{_where(o)}: norm "
                f"{o['norm']:.4g}, median over {ranks_text(o['others'])}: {o['median']:.4g}{more}"
            )
        else:
            sides = ", ".join(
                f"{ranks_text(g['ranks'])} at {g['norms'][0]:.4g}"
                + (f" to {g['norms'][1]:.4g}" if g["norms"][1] != g["norms"][0] else "")
                for g in o["groups"]
            )
            lines.append(
                f"norm split: step {o['step']} {o['node']} {o['slot']}{_where(o)}: {sides}; no majority says "
                f"which is off{more}"
            )
    return lines


def render_text(r: dict) -> str:
    lines = [
        f"{plural(len(r['ranks']), 'rank')}, {plural(r['grad_stats'], 'gradient statistic')}, "
        f"{plural(r['allreduces'], 'allreduce')} "
        f"(aligned by {ALIGNED_BY[r['steps_from']]})"
    ]
    lines += _limited(_nan_lines(r["nan_origins"]))
    lines += _limited([f"error: {ranks_text(e['ranks'])}{_step(e['step'])}: {e['message']}" for e in r["errors"]])
    lines += _limited([_desync_line(d) for d in r["desync"]])
    lines += _limited([_mismatch_line(c) for c in r["collectives"] if c["kind"] == "mismatch"])
    lines += _limited(_unfinished_lines([c for c in r["collectives"] if c["kind"] == "unfinished"]))
    lines += _limited(
        [
            f"the logs of {ranks_text(e['ranks'])} end at step {e['step']} ("
            f"those of {ranks_text(e['others'])} go on to step {e['others_step']})"
            for e in r["log_ends"]
        ]
    )
    lines += _limited(_outlier_lines(r["outliers"]))
    lines += [f"not checked: {', '.join(n['checks'])}: {n['why']}" for n in r["not_checked"]]
    if not r["found"]:
        lines.append("no divergence found" + ("" if r["clean"] else " by the checks that could run"))
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if not args.outlier_factor > 1 or math.isinf(args.outlier_factor):  # `not >`: NaN compares false
        raise InputError(f"--outlier-factor {args.outlier_factor}: must be a finite number greater than 1")
    report = analyse(load(args.paths, warner("diff")), args.outlier_factor)
    if args.json:
        sys.stdout.write(fmt.dumps(report, orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render_text(report))
    return 1 if report["found"] else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "diff",
        help="where ranks diverged: NaN origins, desync, allreduce mismatches",
        description=__doc__.split("\n\n")[1],
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="a run directory, a log root (its latest run) or files")
    p.add_argument("--json", action="store_true", help="the report as JSON")
    p.add_argument(
        "--outlier-factor",
        type=float,
        default=10.0,
        help="flag a rank whose gradient norm is this many times off the median (default 10)",
    )
    p.set_defaults(run=run)
