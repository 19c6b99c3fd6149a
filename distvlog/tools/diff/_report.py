"""All checks over the logs, into one report: errors (first cause first), notes, what could not be
checked, and the largest value of each thresholded statistic (how far a run is from a false alarm)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from . import _flight, _gradients, _parameters, _sequences, _timing
from ._findings import Failed, Finding
from ._logs import Logs


@dataclass
class Report:
    ranks: list[int]
    steps_from: str  # what aligns records across ranks: "step", "logged backward pass" or, for dumps alone,
    # "process group and sequence id"
    counts: dict[str, int]  # what was read: gradient statistics, allreduces, parameter digests, steps
    errors: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    not_checked: list[tuple[list[str], str]] = field(default_factory=list)  # (checks, why)
    largest: dict[str, float] = field(default_factory=dict)
    history: _gradients.History | None = None  # judged with a history: it and the norms judged (for the next)

    @property
    def exit_code(self) -> int:
        return 1 if self.errors else 0


def failures(logs: Logs) -> list[Failed]:
    """E and F records, one finding per step and text with the ranks that logged it. A DataParallel check's
    own records name its culprits: one finding for the check, naming them (the other ranks stopped because
    of them), instead of one per rank's text."""
    grouped: dict[tuple, Failed] = {}
    for rank in sorted(logs.ranks):
        for f in logs.ranks[rank].failures:
            key = ("check", f.step) if f.culprits is not None else (f.step, f.text)
            entry = grouped.setdefault(key, Failed(f.step, [], f.text, f.culprits))
            if f.culprits is not None and rank in f.culprits:
                entry.text = f.text  # the culprit's own words
            if rank not in entry.ranks:
                entry.ranks.append(rank)
    checked = {f.step for key, f in grouped.items() if key[0] == "check"}
    # the ranks of a failed check also raised its DataParallelError, unhandled: their records say it once more
    return [
        f
        for key, f in grouped.items()
        if key[0] == "check" or not (f.step in checked and f.text.startswith("DataParallelError"))
    ]


def not_checked(logs: Logs) -> list[tuple[list[str], str]]:
    """The checks these logs cannot support, and why: finding nothing there does not mean clean."""
    out = []
    ranks = logs.ranks.values()
    if _dumps_only(logs):
        checks = ["NaN/Inf origins", "gradients", "allreduce buckets", "parameters"]
        return [(checks, "the inputs hold Flight Recorder dumps but no gradient statistics or DataParallel records")]
    if not any(r.stats for r in ranks):
        out.append(
            (
                ["NaN/Inf origins", "backward graphs", "node gradient norms"],
                "no grad_stats records (the backward writes them at verbosity >= 5: backward_vlog_guard(5) or "
                "DISTVLOG_V=5)",
            )
        )
    if not any(r.collectives for r in ranks):
        out.append(
            (
                ["allreduces", "bucket gradient norms", "stragglers"],
                "no allreduce records (DataParallel writes them at verbosity >= 1 of module parallel)",
            )
        )
    if not any(r.digests for r in ranks):
        out.append(
            (["parameters"], "no parameter digests (DataParallel writes them at verbosity >= 1 of module parallel)")
        )
    if len(logs.ranks) < 2:
        out.append((["comparisons across ranks"], "the logs of one rank only"))
    return out


def _dumps_only(logs: Logs) -> bool:
    ranks = logs.ranks.values()
    return any(r.dump for r in ranks) and not any(r.stats or r.collectives or r.digests for r in ranks)


def analyse(logs: Logs, history: _gradients.History | None = None, norms_since: int | None = None) -> Report:
    """What the logs show. A live run judged as it goes: the norms of the steps from `norms_since` on only,
    judged with `history`, the norms of the steps before (explosions and spikes in those steps only); the
    report's history then adds theirs."""
    norms = _gradients.series(logs, norms_since)
    points = list(_gradients.points(logs, norms, history))
    straggling, straggler_fraction = _timing.stragglers(logs)
    flight_errors, flight_notes = _flight.findings(logs)
    errors: list[Finding] = [
        *_gradients.nan_origins(logs),
        *_gradients.explosions(points),
        *_sequences.desync(logs),
        *_sequences.collectives_part(logs),
        *_sequences.unfinished(logs),
        *_sequences.result_mismatches(logs),
        *_parameters.parameters_part(logs),
        *_sequences.log_ends(logs),
        *flight_errors,  # before other failures without a step: the dumps name the cause of a hang
        *failures(logs),
    ]
    errors.sort(key=lambda f: f.order)  # (stable: within a step, in the order of the list above)
    counts = defaultdict(int)
    for mine in logs.ranks.values():
        counts["gradient statistics"] += len(mine.stats)
        counts["allreduces"] += len(mine.collectives)
        counts["parameter digests"] += len(mine.digests)
        counts["Flight Recorder entries"] += len(mine.flight)
    steps = {s for mine in logs.ranks.values() for s in mine.step_ts} | {
        s.step for mine in logs.ranks.values() for s in mine.stats
    }
    if not _dumps_only(logs):  # dumps know collectives, not training steps
        counts["steps"] = len(steps)
    return Report(
        sorted(logs.ranks),
        "process group and sequence id" if _dumps_only(logs) else logs.step_source,
        dict(counts),
        errors,
        [*_gradients.spike_notes(points), *straggling, *flight_notes],
        not_checked(logs),
        {**_gradients.largest(points), "straggler": straggler_fraction},
        None if history is None else _gradients.history(norms, history),
    )
