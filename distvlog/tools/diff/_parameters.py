"""The parameter check: replicas must hold bit-identical parameters at the start of every step. The first
step whose digests differ brackets the update that parted them; whether that step's allreduces agreed, and
which parameters differ, tell a silent corruption (one parameter, one bucket) from other hyperparameters
(all of them, from the first update) and a skipped broadcast (step 0)."""

from __future__ import annotations

from collections import defaultdict

from ._findings import ParametersPart
from ._logs import Logs


def parameters_part(logs: Logs) -> list[ParametersPart]:
    """The first step at which the parameter digests of the ranks differ, the minority named (with two
    ranks, or a tie, every side)."""
    logged = {rank: mine for rank, mine in logs.ranks.items() if mine.digests}
    if len(logged) < 2:
        return []
    for step in sorted(set().union(*(mine.digests for mine in logged.values()))):
        at = {rank: tuple(mine.digests[step]) for rank, mine in logged.items() if step in mine.digests}
        if len(at) < 2 or len(set(at.values())) == 1:
            continue
        groups: dict[tuple, list[int]] = defaultdict(list)
        for rank, digests in sorted(at.items()):
            groups[digests].append(rank)
        ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
        (reference, majority), no_majority = ordered[0], len(ordered[1][1]) == len(ordered[0][1])
        culprits = sorted(r for _, ranks in (ordered if no_majority else ordered[1:]) for r in ranks)
        odd = [digests for digests, _ in ordered[1:]]
        differ = sorted(
            {
                i
                for digests in odd
                for i in range(max(len(digests), len(reference)))
                if i >= len(digests) or i >= len(reference) or digests[i] != reference[i]
            }
        )
        names = _names(logs, majority[0], len(reference))
        return [
            ParametersPart(
                step,
                culprits,
                [] if no_majority else majority,
                [names[i] for i in differ if i < len(names)],
                len(reference),
                no_majority,
                _reduced_agree(logs, step - 1),
                _pattern(logs, majority[0], differ),
            )
        ]
    return []


def _names(logs: Logs, rank: int, count: int) -> list[str]:
    names = logs.ranks[rank].names
    return names if len(names) >= count else [f"parameter #{i}" for i in range(count)]


def _reduced_agree(logs: Logs, step: int) -> bool | None:
    """Whether every allreduce of `step` ended with the same checksum on every rank (None: none logged)."""
    results: dict[int, set[str]] = defaultdict(set)
    for mine in logs.ranks.values():
        for c in mine.collectives:
            if c.step == step and c.checksum_out is not None:
                results[c.bucket].add(c.checksum_out)
    return None if not results else all(len(v) == 1 for v in results.values())


def _pattern(logs: Logs, rank: int, differ: list[int]) -> str:
    """'all' when every parameter differs, 'bucket N' when exactly bucket N's do, else 'some'."""
    mine = logs.ranks[rank]
    if mine.names and len(differ) == len(mine.names):
        return "all"
    for index, members in enumerate(mine.buckets):
        if sorted(members) == differ:
            return f"bucket {index}"
    trained = sorted(i for members in mine.buckets for i in members)
    return "all" if trained and differ == trained else "some"
