"""Run against run, judged: where run B first departs from run A, whether within float rounding, and what
the first difference points to.

The first step where anything differs is the departure; what differs first there, in training order, is
the cause, what follows are its consequences (one rounding difference in a gradient changes the update,
then every later parameter, loss and gradient). What it points to:

- the parameters differ as step 0 starts: another initial state (seed, initialisation);
- they differ as a later step starts, although every gradient of the step before was bitwise identical:
  the update differs (learning rate, optimizer, its settings or state); within rounding: an optimizer
  kernel that rounds otherwise;
- the parameters agree and the backward ran other nodes: another graph;
- the parameters agree, the rest differs by no more than float rounding (`rtol`, relative): a different
  summation order or kernel;
- beyond rounding: the loss differs (another data order or data), or only gradients (the backward computes
  otherwise), or only an allreduce's result from identical local gradients (another reduction order).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import InputError
from ._logs import Logs
from ._runs_compare import Comparison, Difference, GraphDifference, compare

DEFAULT_RTOL = 1e-5  # float32 carries 6e-8 relative: a few dozen roundings of a reordered sum stay below this

CAUSES = {
    "initial": "another initial state: another seed or initialisation",
    "update": "the update differs: another learning rate or optimizer (or its settings or state)",
    "update-rounding": "the update rounds otherwise: another optimizer kernel or summation order",
    "graph": "another graph: the backward ran other nodes",
    "rounding": "a different summation order or kernel",
    "data": "the loss differs with the same parameters: another data order or data (or another forward)",
    "backward": "a gradient differs with the same parameters and loss: the backward computes otherwise "
    "(another kernel or op)",
    "allreduce": "an allreduce's result differs from the same local gradients: another reduction order "
    "(another MPI or NCCL algorithm) or a fault in it",
}


@dataclass
class Departure:
    step: int
    within_rounding: bool
    cause: str  # a key of CAUSES
    first: Difference | None  # the first value that differs there, in training order (None: only the graph)
    node: Difference | None  # the first guarded node's gradient that differs there
    graph: GraphDifference | None
    largest: float | None  # the largest relative difference of a statistic, at `largest_step`
    largest_step: int | None  # the departure's step, or the next with a statistic (digests have none)
    parameters: list[str]  # those that differ as the step starts
    parameters_of: int
    steps_after: int  # later steps where something differs
    parameters_from: int | None  # the first later step whose parameters differ
    last_step: int | None  # the last step both runs logged a loss at
    last_loss: float | None  # the loss's largest relative difference there

    @property
    def verdict(self) -> str:
        return "rounding" if self.within_rounding else "departs"


@dataclass
class RunsReport:
    run_a: str
    run_b: str
    comparison: Comparison
    departure: Departure | None
    rtol: float
    bitwise: bool  # any difference, even within rounding, is an error

    @property
    def verdict(self) -> str:
        return "identical" if self.departure is None else self.departure.verdict

    @property
    def exit_code(self) -> int:
        return {"identical": 0, "rounding": int(self.bitwise), "departs": 1}[self.verdict]


def _largest(differences: list[Difference], step: int) -> tuple[float | None, int | None]:
    """The largest relative difference at `step`, or at the first later step that has one."""
    for s in sorted({d.step for d in differences if d.step >= step}):
        found = [d.relative for d in differences if d.step == s and d.relative is not None]
        if found:
            return max(found), s
    return None, None


def _cause(at: list[Difference], graph: GraphDifference | None, first_step: bool, within: bool) -> str:
    phases = {d.phase for d in at if not d.only_in}
    if "parameters" in phases:
        return "initial" if first_step else "update-rounding" if within else "update"
    if graph is not None:
        return "graph"
    if within:
        return "rounding"
    loss = next((d for d in at if d.phase == "loss"), None)
    if loss is not None:
        return "data"
    return "allreduce" if phases == {"reduced"} else "backward"


def judge(c: Comparison, rtol: float) -> Departure | None:
    """Where run B first departs from run A, or None when every value compared is equal."""
    steps = sorted({d.step for d in c.differences} | {g.step for g in c.graphs})
    if not steps:
        return None
    step = steps[0]
    at = [d for d in c.differences if d.step == step]
    graph = next((g for g in c.graphs if g.step == step), None)
    largest, largest_step = _largest(c.differences, step)
    first_step = step == min(set(c.steps_a) & set(c.steps_b))
    within = (
        graph is None
        and not any(d.only_in for d in at)
        and largest is not None
        and largest <= rtol
        and not (first_step and any(d.phase == "parameters" for d in at))
    )
    params = [d for d in at if d.phase == "parameters"]
    later = [s for s in steps if s > step]
    parameters_from = next((d.step for d in c.differences if d.step > step and d.phase == "parameters"), None)
    losses = [d for d in c.differences if d.phase == "loss" and d.relative is not None]
    last = max((d.step for d in losses), default=None)
    return Departure(
        step,
        within,
        _cause(at, graph, first_step, within),
        at[0] if at else None,
        next((d for d in at if d.phase == "node"), None),
        graph,
        largest,
        largest_step,
        [d.name for d in params],
        c.parameters_of,
        len(later),
        parameters_from,
        last,
        max((d.relative for d in losses if d.step == last), default=None),
    )


def analyse_runs(
    run_a: str, logs_a: Logs, run_b: str, logs_b: Logs, rtol: float = DEFAULT_RTOL, bitwise: bool = False
) -> RunsReport:
    """Run B against run A, judged; InputError when they share nothing to compare."""
    c = compare(logs_a, logs_b)
    if not c.compared and not c.differences:
        raise InputError(
            f"{run_a} and {run_b}: nothing to compare (no step in common, or no kind of record both logged)"
        )
    return RunsReport(run_a, run_b, c, judge(c, rtol), rtol, bitwise)
