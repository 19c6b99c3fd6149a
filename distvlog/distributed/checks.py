"""DataParallel's consistency checks: ranks compare notes on a private communicator before a collective,
so a disagreement becomes an error on every rank that names ranks and parameters, instead of a hang or
silently wrong gradients.

Every check is itself collective and cheap when all is well (one small allgather); the expensive
details (parameter lists, producing nodes) are exchanged only once something disagrees. All DataParallels
check on one shared communicator, and `dv.finalize()` joins it while a debug-mode one exists: a rank that
skipped or added a backward pass is named there instead of hanging the clock sync.

A failed check names its culprits: the ranks that brought a non-finite gradient, or the minority that
disagrees (with no majority, every side). Every rank logs the check's own E record, `DataParallel check
failed check=... culprits=[...]` with the `reason` on a culprit and `stopped_by` on the others (one line each
on stderr), then raises DataParallelError with the whole story; `distvlog launch` and `diff` name the
culprits from that record.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .. import format as fmt
from .. import logger as dlog
from ..autograd import Tensor
from ..wording import ranks_text

if TYPE_CHECKING:
    from mpi4py import MPI

    from .buckets import Bucket

MAX_LISTED = 6  # differences named in one error message
_log = dlog.get_logger("distvlog.distributed.checks")


class DataParallelError(RuntimeError):
    """Ranks disagree (model layout, step, collective, gradient values or parameters); raised on every rank.
    `culprits` are the ranks that caused it (the others stopped because of them)."""

    def __init__(self, message: str, culprits: list[int] | None = None) -> None:
        super().__init__(message)
        self.culprits = list(culprits or [])


def _fail(rank: int, check: str, reason: str, culprits: list[int], message: str) -> None:
    """Log the failed check's record and raise DataParallelError(message), on every rank."""
    if rank in culprits:
        _log.error(fmt.CHECK_FAILED, check=check, culprits=culprits, reason=reason)
    else:
        _log.error(fmt.CHECK_FAILED, check=check, culprits=culprits, stopped_by=ranks_text(culprits))
    raise DataParallelError(message, culprits)


def _minority(values: list[Any]) -> list[int]:
    """The ranks outside the largest group of equal values; when no group is larger than the others, all."""
    groups = _groups(values)
    if len(groups) < 2:
        return []
    odd = groups[1:] if len(groups[1][1]) < len(groups[0][1]) else groups
    return sorted(r for _, ranks in odd for r in ranks)


def _groups(values: list[Any]) -> list[tuple[Any, list[int]]]:
    """Ranks grouped by value, the largest group first (ties: the group with the lowest rank)."""
    groups: dict[Any, list[int]] = defaultdict(list)
    for rank, value in enumerate(values):
        groups[value].append(rank)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))


def _spread(what: str, values: list[Any]) -> str:
    """`step 4 on ranks 0,2,3, step 3 on rank 1`."""
    return ", ".join(f"{what} {value} on {ranks_text(ranks)}" for value, ranks in _groups(values))


def _first(items: list[str]) -> list[str]:
    """At most MAX_LISTED items, then how many more there are."""
    return items[:MAX_LISTED] + ([f"... {len(items) - MAX_LISTED} more"] if len(items) > MAX_LISTED else [])


def _have(ranks: list[int]) -> str:
    return "has" if len(ranks) == 1 else "have"


def _layout_text(layouts: list[tuple]) -> str:
    groups = _groups(layouts)
    reference, ref_ranks = groups[0]
    parts = []
    for layout, ranks in groups[1:]:
        if len(layout) != len(reference):
            parts.append(
                f"{ranks_text(ranks)} {_have(ranks)} {len(layout)} parameters, {ranks_text(ref_ranks)} "
                f"{_have(ref_ranks)} {len(reference)}"
            )
        diffs = []
        for i in range(max(len(layout), len(reference))):
            mine = layout[i] if i < len(layout) else None
            ref = reference[i] if i < len(reference) else None
            if mine is None or ref is None:
                present, where = (mine or ref), (ranks if mine else ref_ranks)
                diffs.append(f"{present[0]} only on {ranks_text(where)}")
            elif mine[1:] != ref[1:]:
                diffs.append(
                    f"{ref[0]}: {list(ref[1])} {ref[2]} on {ranks_text(ref_ranks)}, "
                    f"{list(mine[1])} {mine[2]} on {ranks_text(ranks)}"
                )
        parts.extend(_first(diffs))
    return "; ".join(parts)


def nonfinite_text(bucket: Bucket, flat: np.ndarray, step: int, rank: int) -> str | None:
    """What is not finite in a packed bucket, by parameter and producing GradNode (None when all is)."""
    if np.isfinite(flat).all():
        return None
    found = []
    for i, param in enumerate(bucket.params):
        grad = bucket.slot(flat, i)
        n_nan, n_inf = int(np.isnan(grad).sum()), int(np.isinf(grad).sum())
        if n_nan or n_inf:
            producer = param._grad_node().producer  # the AccumulationNode remembers who sent the gradient
            origin = (
                f"produced by {producer.name} (forward at {producer.site})"
                if producer is not None
                else "no GradNode produced it this step"
            )
            found.append(f"gradient of {param.name} has {n_nan} NaN and {n_inf} Inf, {origin}")
    return f"rank {rank} step {step}: " + "; ".join(found)


class Note(NamedTuple):
    """What a rank is about to do, compared across ranks before it does it."""

    owner: int | None  # the DataParallel's number, in order of construction (None: dv.finalize())
    fingerprint: str | None  # of the owner's parameter layout
    step: int
    at: str  # the collective
    bad: bool  # a non-finite gradient

    def where(self) -> str:
        """`allreduce of bucket 0 of step 2 of DataParallel 0`, or `dv.finalize()`."""
        if self.owner is None:
            return self.at
        return f"{self.at}{_of_step(self.step)} of DataParallel {self.owner}"


def _of_step(step: int) -> str:
    return f" of step {step}" if step >= 0 else ""


def agree(comm: MPI.Intracomm, note: Note, layout: tuple = (), bad: str | None = None) -> None:
    """Collective: every rank must bring the same note, without a non-finite gradient (`bad`); else raise
    DataParallelError on every rank, naming what each was about to do."""
    notes = comm.allgather(note)
    if all(n == notes[0] for n in notes) and not notes[0].bad:
        return
    details = comm.allgather((layout, bad))
    problems = []
    if len({n.owner for n in notes}) > 1:  # another DataParallel, or dv.finalize(): steps are not comparable
        problems.append(_spread("at", [n.where() for n in notes]))
    else:
        if len({n.fingerprint for n in notes}) > 1:
            problems.append("parameters differ: " + _layout_text([d[0] for d in details]))
        if len({n.step for n in notes}) > 1:
            problems.append(_spread("step", [n.step for n in notes]))
        if len({n.at for n in notes}) > 1:
            problems.append(_spread("at", [n.at for n in notes]))
    problems.extend(d[1] for d in details if d[1])
    culprits = sorted(
        set(_minority([n._replace(bad=False) for n in notes])) | {r for r, n in enumerate(notes) if n.bad}
    )
    what = note.where() if note.owner is None else note.at + _of_step(note.step)
    reason = " | ".join(problems)
    _fail(comm.rank, f"before {what}", reason, culprits, f"DataParallel check before {what} failed: {reason}")


class Checks:
    """The checks of one DataParallel, on the communicator all DataParallels share for them (so the checks
    of two models, and dv.finalize()'s, meet in program order: a rank elsewhere is an error, not a hang)."""

    def __init__(self, comm: MPI.Intracomm, params: list[Tensor], owner: int) -> None:
        self.comm = comm
        self.params = params
        self.owner = owner
        # a parameter frozen on one rank only would change the gradient buckets: part of the layout
        self.layout = tuple(
            (p.name, tuple(p.shape), str(p.dtype) + (" frozen" if p.stop_gradient else "")) for p in params
        )
        self._fingerprint = hashlib.blake2b(
            repr([entry[1:] for entry in self.layout]).encode(), digest_size=8
        ).hexdigest()

    def before(self, collective: str, step: int, bad: str | None = None) -> None:
        """Collective: all ranks must be about to run the same collective of the same step of this
        DataParallel with the same parameter count, shapes and dtypes, and none may bring a non-finite
        gradient (`bad`)."""
        agree(self.comm, Note(self.owner, self._fingerprint, step, collective, bad is not None), self.layout, bad)

    def parameters(self, step: int) -> str:
        """Collective: a digest of all parameters, which must be bit-identical on every rank."""
        digests = [
            hashlib.blake2b(np.ascontiguousarray(p.numpy()).tobytes(), digest_size=8).hexdigest() for p in self.params
        ]
        everyone = self.comm.allgather(digests)
        differing, culprits = [], set()
        for i, name in enumerate(entry[0] for entry in self.layout):
            values = [d[i] if i < len(d) else None for d in everyone]
            groups = _groups(values)
            if len(groups) > 1:
                odd = _minority(values)
                if len(odd) == len(values):  # no majority
                    differing.append(f"{name} differs between {ranks_text(odd)} (no majority)")
                else:
                    differing.append(
                        f"{name} differs on {ranks_text(odd)} ({ranks_text(groups[0][1])} "
                        f"{'agrees' if len(groups[0][1]) == 1 else 'agree'})"
                    )
                culprits.update(odd)
        if differing:
            reason = "parameters are not identical across replicas: " + "; ".join(_first(differing))
            _fail(
                self.comm.rank,
                f"of parameter hashes at step {step}",
                reason,
                sorted(culprits),
                f"parameters are not identical across replicas at step {step}: " + "; ".join(_first(differing)),
            )
        return hashlib.blake2b("".join(digests).encode(), digest_size=16).hexdigest()
