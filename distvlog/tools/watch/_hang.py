"""A job that stopped making progress: which ranks wait in which allreduce, which have not arrived and where
they are instead (every rank's stacks, grouped), from the records and the ranks' answers to a stacks
request. Ranks blocked in a collective that others have not entered make a hang (an error); ranks that all
run Python (an evaluation, a checkpoint save) make a pause (a note)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ... import format as fmt
from ...wording import ranks_text
from ..diff import Finding, Logs
from ..stacks import Asked, grouped

HANG_MIN_S = 5.0  # never sooner: a loaded machine stalls a rank for a second or two
HANG_STEPS = 10.0  # ... else this many median steps


def threshold(logs: Logs, given: float | None) -> float:
    """How long no rank may make progress before the job is asked where it is: `given`, else HANG_STEPS
    median steps seen so far, never below HANG_MIN_S."""
    if given is not None:
        return given
    times = [
        (mine.step_ts[s + 1] - mine.step_ts[s]) / 1e6
        for mine in logs.ranks.values()
        for s in mine.step_ts
        if s + 1 in mine.step_ts
    ]
    return max(HANG_MIN_S, HANG_STEPS * statistics.median(times)) if times else HANG_MIN_S


@dataclass
class Waiting:
    """Ranks whose last allreduce (the `position`-th they began: step, bucket) is `finished` or not."""

    ranks: list[int]
    position: int
    step: int
    bucket: int
    finished: bool


@dataclass
class Hang(Finding):
    """No progress for `quiet_s`: an error when ranks wait in a collective (the others have not entered it,
    or entered another: nothing else stops a rank blocked in one), else a pause (a note)."""

    quiet_s: float
    threshold_s: float
    error: bool
    allreduces: list[Waiting]  # each rank's last allreduce, grouped
    blocked: list[int]  # ranks whose main thread was blocked in C
    in_python: list[int]
    stacks: list[str]  # grouped, as `distvlog stacks` prints them
    where: list[str]  # ranks grouped by where their main thread is
    starting: bool  # no rank has logged a step yet
    last_records: dict[int, str] = field(default_factory=dict)


def judge(logs: Logs, asked: Asked, quiet_s: float, threshold_s: float, last: dict[int, str]) -> Hang:
    """A hang when some rank waits in a collective: its allreduce begun and not finished, or its main thread
    blocked in C where no rank that runs Python is (a rank that sleeps in Python, as the others do, may be
    found in C by a signal a busy machine delivered late); else a pause."""
    blocked = sorted(r for r, a in asked.answers.items() if a.state == fmt.STATE_BLOCKED)
    in_python = sorted(r for r, a in asked.answers.items() if a.state == fmt.STATE_PYTHON)
    allreduces = _last_allreduces(logs)
    places = {a.where for a in asked.answers.values() if a.state == fmt.STATE_PYTHON}
    stuck = any(not w.finished for w in allreduces) or any(asked.answers[r].where not in places for r in blocked)
    step = min((w.step for w in allreduces if not w.finished), default=None)
    starting = all(mine.last_step < 0 for mine in logs.ranks.values())
    return Hang(
        step,
        quiet_s,
        threshold_s,
        stuck,
        allreduces,
        blocked,
        in_python,
        grouped(asked),
        grouped(asked, True),
        starting,
        last,
    )


def _last_allreduces(logs: Logs) -> list[Waiting]:
    groups: dict[tuple, list[int]] = {}
    for rank, mine in sorted(logs.ranks.items()):
        if mine.collectives:
            c = mine.collectives[-1]
            key = (len(mine.collectives) - 1, c.step, c.bucket, c.ended_ts is not None)
            groups.setdefault(key, []).append(rank)
    return [Waiting(ranks, *key) for key, ranks in sorted(groups.items(), key=lambda kv: kv[1][0])]


def text(h: Hang) -> str:
    """The verdict's lines: what waits where, then the stacks and each rank's last record."""
    head = (
        f"hang: no rank made progress for {h.quiet_s:.1f} s (threshold {h.threshold_s:g} s)"
        if h.error
        else f"pause: no rank made progress for {h.quiet_s:.1f} s (threshold {h.threshold_s:g} s), and none waits "
        f"in a collective: every rank runs Python ({'starting: no step logged yet' if h.starting else 'an evaluation, a checkpoint?'})"
    )
    parts = []
    for w in h.allreduces:
        where = f"allreduce #{w.position} (step {w.step} bucket {w.bucket})"
        parts.append(
            f"{ranks_text(w.ranks)} {'finished' if w.finished else 'wait in'} {where}"
            + (": not arrived where the others wait" if w.finished and h.error else "")
        )
    if h.blocked:
        parts.append(f"{ranks_text(h.blocked)} blocked in C")
    if h.in_python:
        parts.append(f"{ranks_text(h.in_python)} running Python")
    lines = [head + (": " + "; ".join(parts) if parts else "")]
    if not h.error:  # where each group is, not the whole stacks (the JSON has them)
        return "\n".join(lines + ["  " + line for line in h.where])
    lines += ["  " + line for line in h.stacks]
    by_record: dict[str, list[int]] = {}
    for rank, record in sorted(h.last_records.items()):
        by_record.setdefault(record, []).append(rank)
    lines += [f"  last record of {ranks_text(ranks)}: {record}" for record, ranks in by_record.items()]
    return "\n".join(lines)
