"""Checks on what the ranks did, in order: the backward nodes each ran per step (desync), the allreduces
each began (a rank with one more or fewer makes MPI pair the wrong collectives), allreduces not finished or
whose results differ, and logs that end early. Exact comparisons: no threshold."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable
from typing import Any

from ._findings import CollectivesPart, Desync, LogEnd, ResultMismatch, Unfinished
from ._logs import Logs, RankLogs, Stat


def _groups(values: dict[int, Hashable]) -> list[tuple[Any, list[int]]]:
    """Ranks grouped by value, the largest group first (ties: the group with the lowest rank)."""
    groups: dict[Any, list[int]] = defaultdict(list)
    for rank, value in sorted(values.items()):
        groups[value].append(rank)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))


# -- backward nodes ---------------------------------------------------------------------------------------------
def _node_runs(logs: Logs) -> dict[int, dict[int, list[Stat]]]:
    """rank -> step -> the nodes it ran, in order (a Stat of each)."""
    runs: dict[int, dict[int, list[Stat]]] = {}
    for rank, mine in logs.ranks.items():
        if not mine.stats:
            continue
        per_step: dict[int, list[Stat]] = defaultdict(list)
        last_run = None
        for s in mine.stats:
            if s.run != last_run:
                per_step[s.step].append(s)
                last_run = s.run
        runs[rank] = per_step
    return runs


def _stops_in(logs: Logs, rank: int, step: int) -> bool:
    """Whether the rank's logs stop inside this step: its last, and either others' logs go further or the
    rank never finished all of the step's allreduces (without those, the last step of a run is complete)."""
    mine = logs.ranks[rank]
    if mine.last_step != step:
        return False
    return step < max(r.last_step for r in logs.ranks.values()) or any(
        c.step == step and c.ended_ts is None for c in mine.collectives
    )


def desync(logs: Logs) -> list[Desync]:
    """For each rank that ran a different backward than the majority: its first differing step. When no
    majority says which is odd (2 ranks, a 2-2 split), one finding per split naming every side."""
    runs = _node_runs(logs)
    steps = sorted({step for per_rank in runs.values() for step in per_rank})
    out: dict[Any, Desync] = {}  # rank (or the split's groups) -> its finding
    for step in steps:
        ran = {
            rank: tuple(s.op for s in per_step.get(step, ()))
            for rank, per_step in runs.items()
            if logs.ranks[rank].last_step >= step  # a rank whose logs end earlier is no evidence of a different graph
        }
        groups = _groups(ran)
        # the start of another's sequence, cut short because these ranks' logs stop here, agrees with it
        groups = [
            (seq, ranks)
            for seq, ranks in groups
            if not any(
                len(seq) < len(other) and other[: len(seq)] == seq and all(_stops_in(logs, r, step) for r in ranks)
                for other, _ in groups
            )
        ]
        if len(groups) < 2:
            continue
        reference, ref_ranks = groups[0]
        if len(groups[1][1]) == len(ref_ranks):  # no majority
            key = tuple(tuple(ranks) for _, ranks in groups)
            if key not in out:
                at = min(_first_difference(seq, reference) for seq, _ in groups[1:])
                out[key] = Desync(
                    step,
                    sorted(r for _, ranks in groups for r in ranks),
                    [],
                    at,
                    None,
                    None,
                    0,
                    0,
                    0,
                    [(ranks, _node_at(runs[ranks[0]][step], at), len(seq)) for seq, ranks in groups],
                )
            out[key].steps += 1
            continue
        for seq, members in groups[1:]:
            for rank in members:
                if rank not in out:
                    at = _first_difference(seq, reference)
                    out[rank] = Desync(
                        step,
                        [rank],
                        ref_ranks,
                        at,
                        _node_at(runs[rank][step], at),
                        _node_at(runs[ref_ranks[0]][step], at),
                        len(seq),
                        len(reference),
                        0,
                        repeats=_repeats(seq, reference),
                    )
                out[rank].steps += 1
    return sorted(out.values(), key=lambda d: (d.step, d.ranks))


def _repeats(seq: tuple, reference: tuple) -> int:
    """How many times over `seq` is `reference` (1 when it is not a repetition of it)."""
    times = len(seq) // len(reference) if reference else 1
    return times if times > 1 and seq == reference * times else 1


def _first_difference(seq: tuple, other: tuple) -> int:
    return next((i for i, (a, b) in enumerate(zip(seq, other)) if a != b), min(len(seq), len(other)))


def _node_at(nodes: list[Stat], i: int) -> str | None:
    """The real name (counter included) of the i-th node run, as the rank's log spells it."""
    return nodes[i].node if i < len(nodes) else None


# -- allreduces -------------------------------------------------------------------------------------------------
def collectives_part(logs: Logs) -> list[CollectivesPart]:
    """Where the ranks' sequences of begun allreduces first part (the rest follows from it: MPI pairs
    collectives by their order, not their step). A minority that began another allreduce there, or one
    more, or none while the others began one, is named; with no majority every side is."""
    seqs = {
        rank: [(c.step, c.bucket) for c in mine.collectives] for rank, mine in logs.ranks.items() if mine.collectives
    }
    if len(seqs) < 2:
        return []
    for i in range(max(len(s) for s in seqs.values())):
        at = {rank: seq[i] if i < len(seq) else None for rank, seq in seqs.items()}
        groups = _groups(at)
        if len(groups) < 2:
            continue
        if any(v is None for v, _ in groups) and not any(
            seqs[r][i] and logs.ranks[r].collectives[i].ended_ts is None for v, ranks in groups if v for r in ranks
        ):
            continue  # some logs end here, and no rank waited for them: the log-end check says so
        (value, majority), minority = groups[0], groups[1:]
        no_majority = len(minority[0][1]) == len(majority)
        odd, others_value = minority, value
        if no_majority:  # a side whose own sequence shows the fault takes the blame; else every side is named
            odd = _self_evident(groups, seqs, i) or groups
            others_value = next((v for v, _ in groups if all(v != o for o, _ in odd)), None)
        culprits = sorted(r for _, ranks in odd for r in ranks)
        began = odd[0][0]
        others = sorted(set(seqs) - set(culprits))
        step = min(v[0] for v in at.values() if v is not None)
        return [
            CollectivesPart(
                step,
                culprits,
                others,
                i,
                began,
                others_value,
                _how(began, odd[0][1], seqs, i, others_value),
                no_majority,
                {r: _stuck(logs.ranks[r]) for r in sorted(seqs) if logs.ranks[r].signalled},
            )
        ]
    return []


def _self_evident(groups: list, seqs: dict, i: int) -> list:
    """The sides whose own sequence shows the fault: a second allreduce of a bucket in one step, or one of a
    later step than every other side's (it skipped some). A side that began none may only have stopped."""
    more = [(v, ranks) for v, ranks in groups if v is not None and all(v in seqs[r][:i] for r in ranks)]
    begun = [v for v, _ in groups if v is not None]
    ahead = [(v, ranks) for v, ranks in groups if v is not None and len(begun) > 1 and v == max(begun)]
    return more or (ahead if len(ahead) == 1 else [])


def _how(began: tuple[int, int] | None, ranks: list[int], seqs: dict, i: int, others: tuple[int, int] | None) -> str:
    """'more': a second allreduce of a bucket in one step; 'fewer': ahead of the others (it skipped some) or
    none where the others began one; else 'other'."""
    if began is None:
        return "fewer"
    if all(began in seqs[r][:i] for r in ranks):
        return "more"
    if others is None or began > others:
        return "fewer" if others is not None else "more"
    return "other"


def _stuck(mine: RankLogs) -> str:
    s = mine.signalled
    return f"{s.signal} found the main thread {s.state} at {s.where}" if s else ""


def _first_by_key(mine: RankLogs) -> dict[tuple[int, int], Any]:
    out: dict[tuple[int, int], Any] = {}
    for c in mine.collectives:
        out.setdefault((c.step, c.bucket), c)
    return out


def unfinished(logs: Logs) -> list[Unfinished]:
    """Per step, the allreduces that not every rank finished: some began them and never finished, some never
    began them (of the ranks that log allreduces at all); one finding per step and outcome."""
    by_rank = {rank: _first_by_key(mine) for rank, mine in logs.ranks.items() if mine.collectives}
    keys = sorted({key for per in by_rank.values() for key in per})
    found: dict[tuple, Unfinished] = {}
    for key in keys:
        not_finished = sorted(r for r, per in by_rank.items() if key in per and per[key].ended_ts is None)
        not_begun = sorted(r for r, per in by_rank.items() if key not in per)
        if not_finished or not_begun:
            entry = found.setdefault(
                (key[0], tuple(not_finished), tuple(not_begun)), Unfinished(key[0], [], not_finished, not_begun)
            )
            entry.buckets.append(key[1])
    return list(found.values())


def result_mismatches(logs: Logs) -> list[ResultMismatch]:
    """Allreduces (by step and bucket) whose result differs across the ranks that finished them."""
    by_rank = {rank: _first_by_key(mine) for rank, mine in logs.ranks.items() if mine.collectives}
    keys = sorted({key for per in by_rank.values() for key in per})
    out = []
    for key in keys:
        ended = {r: per[key] for r, per in by_rank.items() if key in per and per[key].checksum_out is not None}
        groups = _groups({r: c.checksum_out for r, c in ended.items()})
        if len(groups) > 1:
            odd = sorted(r for _, ranks in groups[1:] for r in ranks)
            params = sorted(
                {
                    p
                    for c in ended.values()
                    for p, v in c.params.items()
                    if len({e.params.get(p) for e in ended.values()}) > 1
                }
            )
            out.append(ResultMismatch(key[0], key[1], odd, groups[0][1], params))
    return out


def log_ends(logs: Logs) -> list[LogEnd]:
    """Ranks whose logs stop at an earlier step than the others' (killed, hung, or their last records never
    written), grouped by the step they stop at."""
    last = {rank: mine.last_step for rank, mine in logs.ranks.items() if mine.last_step >= 0}
    if not last:
        return []
    end = max(last.values())
    stopped: dict[int, list[int]] = defaultdict(list)
    for rank, step in sorted(last.items()):
        stopped[step].append(rank)
    return [LogEnd(step, ranks, stopped[end], end) for step, ranks in sorted(stopped.items()) if step < end]
