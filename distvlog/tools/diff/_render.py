"""A report as text for people (a line per finding, errors first cause first, then notes) or as JSON for
machines (every finding with its fields and its kind)."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable
from functools import singledispatch
from typing import Any

from ...format import dumps
from ...wording import plural, ranks_text
from . import _thresholds as T
from ._findings import (
    CollectivesPart,
    Desync,
    Explosion,
    Failed,
    Finding,
    LogEnd,
    NanArrival,
    NanOrigin,
    NormNote,
    ParametersPart,
    ResultMismatch,
    Straggler,
    Unfinished,
)
from ._flight import FlightFinding
from ._report import Report

MAX_LISTED = 10  # lines of one kind in the text (the JSON has them all)
ALIGNED_BY = {
    "step": "step",
    "logged backward pass": "each rank's logged backward passes, counted from 0",
    "process group and sequence id": "process group and sequence id",
}


def kind(finding: Finding) -> str:
    """`NanOrigin` -> `nan_origin`: a finding's kind in the JSON."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(finding).__name__).lower()


def as_dict(f: Finding) -> dict[str, Any]:
    """A finding for JSON: its kind and its fields."""
    return {"kind": kind(f), **dataclasses.asdict(f)}


def as_json(report: Report) -> bytes:
    return dumps(
        {
            "ranks": report.ranks,
            "aligned_by": report.steps_from,
            "counts": report.counts,
            "exit_code": report.exit_code,
            "errors": [as_dict(f) for f in report.errors],
            "notes": [as_dict(f) for f in report.notes],
            "not_checked": [{"checks": checks, "why": why} for checks, why in report.not_checked],
            "largest": report.largest,
        }
    )


def as_text(report: Report) -> str:
    counts = ", ".join(
        plural(n, noun[:-1] if noun.endswith("s") else noun, noun)
        for noun, n in report.counts.items()
        if n and noun != "steps"
    )
    steps = "" if report.counts.get("steps") is None else f", {plural(report.counts['steps'], 'step')}"
    lines = [
        f"{plural(len(report.ranks), 'rank')}{steps}: {counts or 'nothing to compare'} "
        f"(aligned by {ALIGNED_BY[report.steps_from]})"
    ]
    errors = _limited(report.errors)
    lines += [("" if i == 0 or text.startswith("...") else "  then ") + text for i, text in enumerate(errors)]
    if report.notes:
        lines.append("notes (unusual, not errors: they never change the exit code):")
        lines += ["  " + text for text in _limited(report.notes)]
    lines += [f"not checked: {', '.join(checks)}: {why}" for checks, why in report.not_checked]
    if not report.errors:
        lines.append("no divergence found" + ("" if not report.not_checked else " by the checks that could run"))
    return "\n".join(lines) + "\n"


def context_text(rows: list[Any]) -> str:
    """The collapsed timeline's rows around the first difference (merge's `context`), a line each; a row that
    sets ranks apart starts with `!`."""
    if not rows:
        return "context: every rank wrote the same records (merge --collapse sets none apart)\n"
    lines = ["context (merge --collapse):"]
    lines += [f"{'!' if r.marked else ' '} {r.stamp} {r.site}] [{r.who}] {r.text}" for r in rows]
    return "\n".join(lines) + "\n"


def _limited(findings: list[Finding]) -> list[str]:
    """A line per finding, at most MAX_LISTED of one kind; then how many more of each kind there are."""
    lines, seen = [], Counter()
    for f in findings:
        seen[kind(f)] += 1
        if seen[kind(f)] <= MAX_LISTED:
            lines.append(line(f))
    more = [f"{n - MAX_LISTED:,} more {name.replace('_', ' ')}" for name, n in seen.items() if n > MAX_LISTED]
    return lines + ([f"... {', '.join(more)} (--json lists them all)"] if more else [])


def _at(site: str | None) -> str:
    return f" (forward at {site})" if site else ""


def _x(a: float, b: float | None) -> str:
    """`1.2e+06x` / `30x`: how many times a is of b."""
    if not b:
        return "infinitely many times"
    ratio = a / b
    return f"{ratio:.3g}x" if ratio >= 1 else f"1/{1 / ratio:.3g}"


def _owner(ranks: list[int]) -> str:
    """`rank 2's`, `ranks 0,1's`."""
    return ranks_text(ranks) + "'s"


@singledispatch
def line(finding: Finding) -> str:
    raise TypeError(f"no text for {type(finding).__name__}")


@line.register
def _(f: FlightFinding) -> str:
    return f.text()


@line.register
def _(f: NanOrigin) -> str:
    note = "" if f.how == "origin" else " (already non-finite where logging starts: its producer is not logged)"
    return (
        f"NaN/Inf {f.how}: rank {f.rank} step {f.step} {f.node} {f.slot}{_at(f.site)}: {f.nan} NaN, {f.inf} Inf{note}"
    )


@line.register
def _(f: NanArrival) -> str:
    return (
        f"NaN/Inf on {ranks_text(f.ranks)} from step {f.step}: arrived through the allreduce of step "
        f"{f.allreduce_step} from {ranks_text(f.from_ranks)}"
    )


@line.register
def _(f: Explosion) -> str:
    where = f"{'first seen at ' if f.first_seen else ''}{f.node}{_at(f.site)}, " if f.node else ""
    history = (
        f", {_x(f.norm, f.history)} the largest before ({f.history:.4g})"
        if f.history is not None
        else " (no history yet)"
    )
    return (
        f"gradient explosion: rank {f.rank} step {f.step} {where}{f.where}: local norm {f.norm:.4g}, "
        f"{_x(f.norm, f.peers)} its peers' largest ({f.peers:.4g}){history}"
    )


@line.register
def _(f: Desync) -> str:
    steps = f"({plural(f.steps, 'step')} {'differs' if f.steps == 1 else 'differ'})"
    if f.groups:
        named = all(ran for _, ran, _ in f.groups)
        sides = ", ".join(
            f"{ranks_text(ranks)} ran {ran if named else plural(n, 'node')}" for ranks, ran, n in f.groups
        )
        return (
            f"desync: {ranks_text(f.ranks)} differ at step {f.step} node #{f.position}, no majority says which "
            f"is off: {sides} {steps}"
        )
    what = (
        f"ran {f.ran} where {ranks_text(f.others)} ran {f.others_ran}"
        if f.ran and f.others_ran
        else f"ran {f.nodes} nodes where {ranks_text(f.others)} ran {f.others_nodes}"
    )
    if f.repeats > 1:
        what += f": the same nodes {f.repeats} times, {f.repeats} backward passes in one step"
    return f"desync: rank {f.ranks[0]} step {f.step} node #{f.position}: {what} {steps}"


def _allreduce(value: tuple[int, int] | None) -> str:
    return "none" if value is None else f"step {value[0]} bucket {value[1]}"


_HOW: dict[str, Callable[[CollectivesPart], str]] = {
    "more": lambda f: (
        f"one allreduce more: a second allreduce of {_allreduce(f.began)} in one step"
        if f.began
        else "one allreduce more"
    ),
    "fewer": lambda f: (
        "one allreduce fewer (or its logs stop before it)"
        if f.began is None
        else f"one allreduce fewer: it skipped the rest of step {f.others_began[0]}'s"
        if f.others_began
        else "one allreduce fewer"
    ),
    "other": lambda f: "another allreduce",
}


@line.register
def _(f: CollectivesPart) -> str:
    who = ranks_text(f.ranks)
    where = (
        f"{who} began {_allreduce(f.began)} as allreduce #{f.position}"
        if f.began is not None
        else f"{who} began no allreduce #{f.position}"
    )
    others = f" where {ranks_text(f.others)} began {_allreduce(f.others_began)}" if f.others else ""
    blame = ""
    if f.no_majority:
        blame = "; no majority says which is off" if not f.others else f"; with no majority, {who}'s own log shows it"
    by_text: dict[str, list[int]] = {}
    for rank, text in f.stuck.items():
        by_text.setdefault(text, []).append(rank)
    stuck = "; ".join(f"{ranks_text(ranks)}: {text}" for text, ranks in by_text.items() if text)
    return (
        f"allreduces part: {where}{others}: {_HOW[f.how](f)}{blame}; MPI pairs collectives in order, so "
        f"from here on they are mismatched" + (f" ({stuck})" if stuck else "")
    )


@line.register
def _(f: Unfinished) -> str:
    it = "them" if len(f.buckets) > 1 else "it"
    what = [f"{ranks_text(f.not_finished)} began {it} and never finished"] if f.not_finished else []
    what += [f"{ranks_text(f.not_begun)} never began {it}"] if f.not_begun else []
    return (
        f"allreduce step {f.step} bucket{'s' if len(f.buckets) > 1 else ''} "
        f"{','.join(map(str, f.buckets))}: " + "; ".join(what)
    )


@line.register
def _(f: ResultMismatch) -> str:
    params = f" (parameters {', '.join(f.params)})" if f.params else ""
    return f"allreduce step {f.step} bucket {f.bucket}: result differs on {ranks_text(f.ranks)} from {ranks_text(f.others)}{params}"


def _params(f: ParametersPart) -> str:
    listed = ", ".join(f.params[:6]) + (", ..." if len(f.params) > 6 else "")
    return f"{len(f.params)} of {f.of} parameters: {listed}"


_PATTERN_HINTS = {
    "all": "every parameter: its update differs (learning rate, weight decay, optimizer or its state)",
    "some": "only these parameters: their values were changed (a bit flip, a stray write)",
}


def _hint(f: ParametersPart) -> str:
    if f.step == 1:
        return (
            "from the first update on: another learning rate, weight decay or optimizer (parameters that "
            "stayed equal had no gradient or no effect yet)"
            if f.pattern != "all"
            else "every parameter, from the first update on: another learning rate, weight decay or optimizer"
        )
    if f.pattern.startswith("bucket"):
        return f"exactly {f.pattern}'s parameters: its averaged gradients were changed after the allreduce"
    return _PATTERN_HINTS[f.pattern]


@line.register
def _(f: ParametersPart) -> str:
    who = ranks_text(f.ranks)
    if f.no_majority:
        head = f"parameters part: {who} hold different parameters from step {f.step} on ({_params(f)})"
        blame = "; no majority says which one is off"
    else:
        head = (
            f"parameters part: {_owner(f.ranks)} parameters differ from those of {ranks_text(f.others)} from "
            f"step {f.step} on ({_params(f)})"
        )
        blame = ""
    if f.step == 0:
        return f"{head}: before any update — a skipped initial broadcast, or parameters changed before step 0{blame}"
    reduced = {
        True: f"although the allreduces of step {f.step - 1} gave every rank the same gradients",
        False: f"and the allreduces of step {f.step - 1} already differ",
        None: f"(the allreduces of step {f.step - 1} are not logged)",
    }[f.reduced_agree]
    changed = (
        "one of them changed its gradients or parameters after the allreduce"
        if f.no_majority
        else f"{who} changed {'its' if len(f.ranks) == 1 else 'their'} gradients or parameters after the allreduce"
    )
    return f"{head}, {reduced}: {changed} — {_hint(f)}{blame}"


@line.register
def _(f: LogEnd) -> str:
    return (
        f"the logs of {ranks_text(f.ranks)} end at step {f.step} (those of {ranks_text(f.others)} go on to "
        f"step {f.others_step})"
    )


@line.register
def _(f: Failed) -> str:
    step = "" if f.step is None else f" step {f.step}"
    if f.culprits is None:
        return f"error: {ranks_text(f.ranks)}{step}: {f.text}"
    stopped = sorted(set(f.ranks) - set(f.culprits))
    also = f"; {ranks_text(stopped)} stopped because of {'it' if len(f.culprits) == 1 else 'them'}" if stopped else ""
    return f"DataParallel check failed on {ranks_text(f.culprits)}{step}: {f.text}{also}"


@line.register
def _(f: NormNote) -> str:
    more = f" ({plural(f.steps, 'step')} above {T.NOTE_SPIKE:g}x)" if f.steps > 1 else ""
    return (
        f"gradient spike: rank {f.rank} step {f.step} {f.where}: local norm {f.norm:.4g}, {_x(f.norm, f.reference)} "
        f"its peers' and anything seen before ({f.reference:.4g}){more}"
    )


@line.register
def _(f: Straggler) -> str:
    return (
        f"straggler: rank {f.rank}: the other ranks wait for it {f.lost_ms:.3g} ms per step (median over "
        f"{plural(f.steps, 'step')}; it waits {f.its_wait_ms:.3g} ms, they {f.others_wait_ms:.3g} ms; a step "
        f"takes {f.step_ms:.3g} ms)"
    )
