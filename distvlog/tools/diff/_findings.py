"""What the checks find, as types: errors (a fault: exit 1) and notes (unusual, never change the exit
code; `NormNote`, `Straggler`). Each names the rank(s) to blame, the step and the place; `order` puts a first cause before its
consequences (a step's backward comes before its update, which shows in the next step's parameters)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Finding:
    step: int | None

    @property
    def order(self) -> float:
        """When it happened, in steps: findings are listed earliest first."""
        return math.inf if self.step is None else float(self.step)


# -- errors --------------------------------------------------------------------------------------------------
@dataclass
class NanOrigin(Finding):
    """A gradient turned NaN/Inf in this node (`how` "origin"), or was already so where logging starts
    ("first seen")."""

    how: str
    rank: int
    node: str
    slot: str
    site: str | None
    nan: int
    inf: int
    ts: int


@dataclass
class NanArrival(Finding):
    """NaN/Inf on `ranks` from `step` on, carried there by the averaged gradients of `allreduce_step` from
    `from_ranks`: a consequence."""

    ranks: list[int]
    allreduce_step: int
    from_ranks: list[int]

    @property
    def order(self) -> float:
        return self.step + 0.9


@dataclass
class Explosion(Finding):
    """A rank's local gradient norm orders of magnitude above its peers' and anything seen before."""

    rank: int
    where: str  # `bucket 0 (linear_2.w_0, ...)` or a node and slot
    site: str | None
    norm: float
    peers: float  # the largest of the other ranks' at this step
    history: float | None  # the largest of any rank's before this step (None: no history yet)
    node: str | None = None  # where it starts, from the guarded nodes' statistics
    first_seen: bool = False  # the node's incoming gradient had exploded already (its producer is not judged)


@dataclass
class Desync(Finding):
    """`ranks` ran another sequence of backward nodes than `others` (no majority: `groups` name every side)."""

    ranks: list[int]
    others: list[int]
    position: int  # the first node that differs, counted from 0
    ran: str | None
    others_ran: str | None
    nodes: int
    others_nodes: int
    steps: int  # steps that differ, from this one on
    groups: list[tuple[list[int], str | None, int]] = field(default_factory=list)  # no majority: (ranks, ran, nodes)
    repeats: int = 1  # the rank ran the others' nodes this many times over (backward passes in one step)


@dataclass
class CollectivesPart(Finding):
    """Where the ranks' sequences of allreduces part: `ranks` began another allreduce (or none) at their
    `position`-th, so MPI paired different collectives from there (a hang, wrong sums, an early end)."""

    ranks: list[int]
    others: list[int]
    position: int
    began: tuple[int, int] | None  # (step, bucket) `ranks` began there; None: none (their logs stop)
    others_began: tuple[int, int] | None
    how: str  # "more" (a second allreduce of a bucket in one step), "fewer" (a step's allreduces skipped), "other"
    no_majority: bool = False
    stuck: dict[int, str] = field(default_factory=dict)  # rank -> where a signal found it (file:line, state)


@dataclass
class Unfinished(Finding):
    """Allreduces of a step that some ranks began and never finished, or never began."""

    buckets: list[int]
    not_finished: list[int]
    not_begun: list[int]

    @property
    def order(self) -> float:
        return self.step + 0.5


@dataclass
class ResultMismatch(Finding):
    """An allreduce whose result differs across ranks (MPI should give everyone the same sum)."""

    bucket: int
    ranks: list[int]
    others: list[int]
    params: list[str]

    @property
    def order(self) -> float:
        return self.step + 0.5


@dataclass
class ParametersPart(Finding):
    """The parameters of `ranks` differ from those of `others` as `step` starts, first there: the update of
    step - 1 (or, at step 0, the initial broadcast) parted them."""

    ranks: list[int]
    others: list[int]
    params: list[str]  # the parameters that differ
    of: int  # parameters in all
    no_majority: bool
    reduced_agree: bool | None  # the allreduces of step - 1 gave every rank the same result (None: not logged)
    pattern: str  # "all" (every parameter), "bucket N" (exactly one bucket's), "some"

    @property
    def order(self) -> float:
        return self.step - 0.25  # after step - 1's backward and allreduce, before step's


@dataclass
class LogEnd(Finding):
    """The logs of `ranks` end at `step`, those of `others` go on to `others_step`."""

    ranks: list[int]
    others: list[int]
    others_step: int

    @property
    def order(self) -> float:
        return self.step + 0.95


@dataclass
class Failed(Finding):
    """E and F records with one text, and the ranks that logged them; a DataParallel check names its
    `culprits` (the others stopped because of them)."""

    ranks: list[int]
    text: str
    culprits: list[int] | None = None

    @property
    def order(self) -> float:
        return math.inf if self.step is None else self.step + 0.8


# -- notes ---------------------------------------------------------------------------------------------------
@dataclass
class NormNote(Finding):
    """A rank's local gradient norm well above its peers' and everything seen before, short of an explosion,
    at `steps` steps; `step` is the one furthest above."""

    rank: int
    where: str
    norm: float
    reference: float  # the larger of its peers' largest at the step and anything seen before
    steps: int


@dataclass
class Straggler(Finding):
    """A rank the others wait for: `lost_ms` per step (median) of the others' time, over `steps` steps."""

    rank: int
    lost_ms: float
    its_wait_ms: float
    others_wait_ms: float
    steps: int
    step_ms: float
