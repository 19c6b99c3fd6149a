"""A run-against-run report as text for people (the verdict first, then how the runs went apart, what was
compared and what could not be) or as JSON for machines."""

from __future__ import annotations

import dataclasses

from ...format import dumps
from ...wording import plural, ranks_text
from ._departure import CAUSES, Departure, RunsReport
from ._runs_compare import Comparison, Difference


def _steps(steps: list[int]) -> str:
    if not steps:
        return "no steps"
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"


def _run(name: str, path: str, ranks: list[int], steps: list[int]) -> str:
    return f"run {name}: {path} ({plural(len(ranks), 'rank')}, {_steps(steps)})"


def _rel(x: float | None) -> str:
    return "an unknown amount (no statistic)" if x is None else f"{x:.2g} (relative)"


def _at(d: Difference) -> str:
    site = f" (forward at {d.site})" if d.site else ""
    where = "" if not d.ranks else f" on {d.where}"
    if d.phase == "node":
        return f"node {d.name}{site}{where}"
    if d.phase == "parameters":
        return f"parameter {d.name}{where}"
    return f"{d.name}{where}"


def _difference(d: Difference) -> str:
    if d.only_in:
        return f"{_at(d)}: only run {d.only_in} logged it"
    return f"{_at(d)} differs by {_rel(d.relative)}"


def _world(c: Comparison) -> str:
    return (
        ""
        if c.per_rank
        else f" (expected: run A has {len(c.ranks_a)} ranks, run B {len(c.ranks_b)}, so every rank trains on "
        "another shard)"
    )


def _headline(dep: Departure, report: RunsReport) -> str:
    c, cause = report.comparison, CAUSES[dep.cause]
    if dep.within_rounding:
        named = dep.node or dep.first
        return (
            f"departs within rounding at step {dep.step}: {_difference(named)}; every difference there is at most "
            f"{dep.largest:.2g}, within float rounding (--rtol {report.rtol:g}): {cause}"
        )
    if dep.cause == "graph":
        g = dep.graph
        return (
            f"departs at step {dep.step}: {cause}: {ranks_text(g.ranks)} ran {g.ran_b or 'no node'} as backward node "
            f"#{g.position} where run A ran {g.ran_a or 'none'}"
        )
    if dep.parameters:
        named = ", ".join(dep.parameters[:4]) + (", ..." if len(dep.parameters) > 4 else "")
        which = "the initial parameters" if dep.cause == "initial" else f"the parameters as step {dep.step} starts"
        before = (
            "" if dep.cause == "initial" else f", although every value of step {dep.step - 1} compared was identical"
        )
        how = f"; at step {dep.largest_step} the largest difference is {_rel(dep.largest)}" if dep.largest else ""
        return f"departs at step {dep.step}: {which} differ ({len(dep.parameters)} of {dep.parameters_of}: {named}){before}: {cause}{how}{_world(c)}"
    return f"departs at step {dep.step}: {_difference(dep.first)}: {cause}{_world(c)}"


def _details(dep: Departure, report: RunsReport) -> list[str]:
    c = report.comparison
    lines = []
    if dep.first is not None and dep.first is not dep.node and dep.within_rounding:
        lines.append(f"  first at step {dep.step}: {_difference(dep.first)}")
    elif dep.node is not None and dep.first is not dep.node and dep.cause != "graph":
        lines.append(f"  first node gradient to differ at step {dep.step}: {_difference(dep.node)}")
    common = sorted(set(c.steps_a) & set(c.steps_b))
    before = [s for s in common if s < dep.step]
    if before:
        lines.append(f"  before it: bitwise identical at {_steps(before)}")
    if not dep.parameters and c.compared.get("parameter digests"):
        lines.append(f"  the parameters were identical as step {dep.step} started")
    if dep.steps_after:
        after = f"  then: {plural(dep.steps_after, 'later step')} {'differs' if dep.steps_after == 1 else 'differ'}"
        if dep.parameters_from is not None:
            after += f", the parameters from step {dep.parameters_from}"
        if dep.last_step is not None and dep.last_step > dep.step:
            after += f"; at step {dep.last_step} the loss differs by {_rel(dep.last_loss)}"
        lines.append(after)
    return lines


def _compared(c: Comparison) -> str:
    counts = ", ".join(plural(n, noun[:-1], noun) for noun, n in c.compared.items() if n)
    if c.compared.get("node gradients") and not c.node_checksums:
        counts += " (node gradients by their norms: guard level 6 logs checksums)"
    who = ranks_text(c.ranks_a) if c.per_rank else "the runs as wholes"
    common = sorted(set(c.steps_a) & set(c.steps_b))
    return f"{who}, {_steps(common)}: {counts or 'nothing'}"


def as_text(report: RunsReport) -> str:
    c, dep = report.comparison, report.departure
    lines = [_run("A", report.run_a, c.ranks_a, c.steps_a) + "; " + _run("B", report.run_b, c.ranks_b, c.steps_b)]
    if dep is None:
        lines.append(f"bitwise identical: every value compared is equal: {_compared(c)}")
    else:
        lines.append(_headline(dep, report))
        lines += _details(dep, report)
        lines.append(f"compared: {_compared(c)}")
    lines += [f"not compared: {what}: {why}" for what, why in c.not_compared]
    if dep is not None and dep.within_rounding:
        lines.append(
            "a departure within rounding is an error only with --bitwise"
            if not report.bitwise
            else "--bitwise: a departure within rounding is an error"
        )
    return "\n".join(lines) + "\n"


def as_json(report: RunsReport) -> bytes:
    c, dep = report.comparison, report.departure
    return dumps(
        {
            "run_a": report.run_a,
            "run_b": report.run_b,
            "verdict": report.verdict,
            "exit_code": report.exit_code,
            "rtol": report.rtol,
            "ranks_a": c.ranks_a,
            "ranks_b": c.ranks_b,
            "steps_a": len(c.steps_a),
            "steps_b": len(c.steps_b),
            "compared": c.compared,
            "identical_steps": c.identical_steps,
            "departure": None if dep is None else {**dataclasses.asdict(dep), "cause_text": CAUSES[dep.cause]},
            "differences": [dataclasses.asdict(d) for d in c.differences],
            "graphs": [dataclasses.asdict(g) for g in c.graphs],
            "not_compared": [{"what": what, "why": why} for what, why in c.not_compared],
        }
    )
