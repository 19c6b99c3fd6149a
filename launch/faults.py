"""The faults `launch/train.py` can plant on one rank, so that `distvlog diff` can be seen finding each on a
real run (and the tests can plant them). Every fault has `--inject-NAME-rank R`; those that happen once have
`--inject-NAME-step S` too (default 3), the others act from the start, every step. Several may be planted
in one run. This module holds the flags and the schedule; how a fault is planted is the training script's.

`--inject-numerics-step S` acts on every rank alike, so the ranks of the run still agree: it plants a
departure between two runs of the job for `distvlog diff RUN_A RUN_B` to find.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

DEFAULT_STEP = 3
SLOW_MS = 20.0
EXPLOSION = 1e6  # --inject-explode: the factor on the middle layer's gradient
FLIPPED_BIT = 1 << 12  # --inject-bitflip: a low mantissa bit of a float32 (x1.0005: training goes on unaware)


@dataclass(frozen=True)
class Fault:
    name: str
    what: str  # what it does on the rank, for --help
    once: bool  # at one step (--inject-NAME-step), else every step from the start


FAULTS = (
    Fault("nan", "the guarded layer's backward produces NaN (a square root at zero)", True),
    Fault("explode", "the guarded layer's backward multiplies its gradient by 1e6 (gradient explosion)", True),
    Fault("bitflip", "after the optimizer step, one bit of one parameter flips (silent corruption)", True),
    Fault("scale", "after the allreduce, the averaged gradients of bucket 0 are doubled (silent corruption)", True),
    Fault("lr", "trains with twice the learning rate of the others", False),
    Fault("weight-decay", "trains with weight decay 0.01, the others without", False),
    Fault("no-broadcast", "keeps parameters initialised from its own seed (as if it skipped the broadcast)", False),
    Fault("graph", "the guarded layer runs tanh instead of relu (its backward runs another graph)", True),
    Fault("extra-allreduce", "runs a second backward: one allreduce of every bucket more (the job hangs)", True),
    Fault("skip-allreduce", "runs its backward under no_sync: one allreduce of every bucket fewer (hangs)", True),
    Fault("slow", "sleeps --inject-slow-ms before its backward, every step (a straggler)", False),
)
_BY_NAME = {f.name: f for f in FAULTS}


def _dest(name: str, what: str) -> str:
    return f"inject_{name.replace('-', '_')}_{what}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--inject-NAME-rank R [--inject-NAME-step S]` for every fault, and `--inject-slow-ms`."""
    group = parser.add_argument_group(
        "fault injection", "plant a fault on rank R, to see `distvlog diff` name it (steps count from 0)"
    )
    for fault in FAULTS:
        group.add_argument(f"--inject-{fault.name}-rank", type=int, metavar="R", help=f"rank R: {fault.what}")
        if fault.once:
            group.add_argument(
                f"--inject-{fault.name}-step", type=int, metavar="S", help=f"... at step S (default {DEFAULT_STEP})"
            )
    group.add_argument("--inject-slow-ms", type=float, metavar="MS", help=f"... this long (default {SLOW_MS:g})")
    group.add_argument(
        "--inject-numerics-step",
        type=int,
        metavar="S",
        help="every rank, from step S on: the same sums in another order, as a new kernel would "
        "(a departure from another run of the job, for `distvlog diff RUN_A RUN_B`)",
    )


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what would be ignored or could never happen (usage, the reason, status 2, as argparse does);
    fill in the default steps."""
    for fault in FAULTS:
        rank = getattr(args, _dest(fault.name, "rank"))
        step = getattr(args, _dest(fault.name, "step"), None)
        if rank is not None and rank < 0:
            parser.error(f"--inject-{fault.name}-rank {rank}: must be at least 0")
        if not fault.once:
            continue
        if rank is None:
            if step is not None:
                parser.error(f"--inject-{fault.name}-step {step}: needs --inject-{fault.name}-rank")
            continue
        given = f"--inject-{fault.name}-step {step}"
        if step is None:
            step, given = DEFAULT_STEP, f"--inject-{fault.name}-step {DEFAULT_STEP} (the default)"
            setattr(args, _dest(fault.name, "step"), step)
        if step < 0:
            parser.error(f"{given}: must be at least 0")
        if step >= args.steps:
            parser.error(f"{given}: beyond the last step, {args.steps - 1} (--steps {args.steps})")
    numerics = args.inject_numerics_step
    if numerics is not None and not 0 <= numerics < args.steps:
        parser.error(f"--inject-numerics-step {numerics}: must be a step, 0 to {args.steps - 1} (--steps {args.steps})")
    if args.inject_slow_ms is not None:
        if args.inject_slow_rank is None:
            parser.error(f"--inject-slow-ms {args.inject_slow_ms:g}: needs --inject-slow-rank")
        if not args.inject_slow_ms > 0:  # (NaN too)
            parser.error(f"--inject-slow-ms {args.inject_slow_ms:g}: must be positive")


def beyond_world(args: argparse.Namespace, world: int) -> str | None:
    """The first --inject-NAME-rank beyond the last rank, as an error text; None when all are within."""
    for fault in FAULTS:
        rank = getattr(args, _dest(fault.name, "rank"))
        if rank is not None and rank >= world:
            return f"--inject-{fault.name}-rank {rank}: beyond the last rank, {world - 1} ({world} ranks)"
    return None


class Plan:
    """Which faults this rank plants, and when."""

    def __init__(self, args: argparse.Namespace, rank: int) -> None:
        self._mine = {
            f.name: getattr(args, _dest(f.name, "step"), None) if f.once else None
            for f in FAULTS
            if getattr(args, _dest(f.name, "rank")) == rank
        }
        self.planted = {f.name for f in FAULTS if getattr(args, _dest(f.name, "rank")) is not None}
        self.slow_s = (args.inject_slow_ms or SLOW_MS) / 1e3
        self._numerics_from = args.inject_numerics_step

    def other_numerics(self, step: int) -> bool:
        """Whether every rank computes its sums in another order at `step` (--inject-numerics-step)."""
        return self._numerics_from is not None and step >= self._numerics_from

    def now(self, name: str, step: int | None = None) -> bool:
        """Whether this rank plants fault `name` at `step` (a fault without a step: at every step)."""
        fault = _BY_NAME[name]
        return name in self._mine and (not fault.once or self._mine[name] == step)

    def anywhere(self, name: str) -> bool:
        """Whether some rank plants fault `name` (then every rank runs the same graph around it)."""
        return name in self.planted
