"""Checks over PyTorch Flight Recorder dumps: which rank a hung or failed collective waits for, and why.

Entries are aligned across ranks by (process group, sequence id), never by record id (the ring buffer is
shared by every group, and ranks' windows start at different records). Each rank is placed at its first
collective not completed when its dump knows completions (NCCL with timing), else at its last one (gloo:
entries stay `scheduled`); it waits for the group's members that never issued that collective. From that:
- a mismatch: ranks that ran another op, sizes or dtypes as the same collective (the minority named);
- ranks a collective short (the others wait for them) or ahead (they wait for the others), the minority
  being the culprit, with the first place their frames part from the others';
- a cycle across groups: ranks waiting in one group for ranks that wait in another (groups used in
  another order);
- a rank that issued a collective later than the others' timeout after them (with gloo, when every rank got
  there in the end, creation times are all that shows who was late; hosts' clocks must agree for this);
- ranks without a dump: an error when others wait for them, a note otherwise.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ...wording import ranks_text
from ._findings import Finding
from ._logs import FrEntry, Logs

_NO_FRAME = "flight_recorder:"


@dataclass
class FlightFinding(Finding):
    """A finding from Flight Recorder dumps (no step: dumps know collectives, not training steps)."""

    def text(self) -> str:
        raise NotImplementedError


def _at(op: str, seq: int, pg: str) -> str:
    return f"{op} #{seq} of group {pg}"


def _site(site: str) -> str:
    """` at file:line`, nothing where the dump carries no Python frames (JSON dumps, stacks off)."""
    return "" if site.startswith(_NO_FRAME) else f" at {site}"


@dataclass
class FrMismatch(FlightFinding):
    """`ranks` ran another collective than `others` as the same sequence id of a group."""

    ranks: list[int]
    others: list[int]
    pg: str
    seq: int
    ran: str
    others_ran: str
    site: str
    others_site: str

    def text(self) -> str:
        return (
            f"{ranks_text(self.ranks)} ran {self.ran} as collective #{self.seq} of group {self.pg} ({self.site}), "
            f"{ranks_text(self.others)} {self.others_ran} ({self.others_site})"
        )


@dataclass
class FrBehind(FlightFinding):
    """`ranks` are `count` collectives short of (`how` "short") or ahead of ("ahead") `others` in a group."""

    ranks: list[int]
    others: list[int]
    how: str
    count: int
    pg: str
    seq: int  # the first collective one side issued and the other did not
    op: str
    site: str
    parted: tuple[int, str, str] | None = None  # (seq, the culprits' site, the others' site) where frames part

    def text(self) -> str:
        n = "one collective" if self.count == 1 else f"{self.count} collectives"
        who = f"{ranks_text(self.ranks)} {'is' if len(self.ranks) == 1 else 'are'} {n} {self.how} in group {self.pg}"
        if self.how == "short":
            out = f"{who}: never issued {self.op} #{self.seq}, which {ranks_text(self.others)} issued{_site(self.site)} and wait in"
        else:
            out = f"{who}: issued {self.op} #{self.seq}{_site(self.site)}, which {ranks_text(self.others)} never did; waiting for them"
        if self.parted:
            seq, mine, theirs = self.parted
            out += f"; its #{seq} came from {mine}, the others' from {theirs}"
        return out


@dataclass
class FrOrder(FlightFinding):
    """`ranks` wait in one group for `others`, who wait in another group for them."""

    ranks: list[int]
    others: list[int]
    at: str
    site: str
    others_at: str
    others_site: str

    def text(self) -> str:
        return (
            f"{ranks_text(self.ranks)} used the process groups in another order: waiting at {self.at} ({self.site}) "
            f"for {ranks_text(self.others)}, which wait at {self.others_at} ({self.others_site}) for "
            + ("it" if len(self.ranks) == 1 else "them")
        )


@dataclass
class FrLate(FlightFinding):
    """`rank` issued a collective more than the others' timeout after them."""

    rank: int
    others: list[int]
    pg: str
    seq: int
    op: str
    late_s: float
    timeout_s: float
    site: str

    def text(self) -> str:
        return (
            f"rank {self.rank} issued {_at(self.op, self.seq, self.pg)} ({self.site}) {self.late_s:.1f} s after "
            f"{ranks_text(self.others)}, past their {self.timeout_s:g} s timeout: they timed out waiting for it"
        )


@dataclass
class FrNoDump(FlightFinding):
    """Ranks of the job that left no dump, and who waits for them where."""

    ranks: list[int]
    world: int
    waiting: list[int] = field(default_factory=list)
    at: str = ""
    site: str = ""
    certain: bool = True  # the waiting ranks' dumps know which collectives completed (NCCL with timing)

    def text(self) -> str:
        if not self.waiting:
            return f"no Flight Recorder dump from {ranks_text(self.ranks)} (of {self.world}): not compared"
        it = "it" if len(self.ranks) == 1 else "them"
        if self.certain:
            return f"{ranks_text(self.ranks)} left no Flight Recorder dump; {ranks_text(self.waiting)} wait for {it} at {self.at} ({self.site})"
        return (
            f"{ranks_text(self.ranks)} left no Flight Recorder dump; {ranks_text(self.waiting)} stopped at {self.at} "
            f"({self.site}), which {it} may not have reached (their dumps do not say what completed)"
        )


def findings(logs: Logs) -> tuple[list[FlightFinding], list[FlightFinding]]:
    """(errors, notes) from the ranks' dumps."""
    dumps = {r: m for r, m in logs.ranks.items() if m.dump is not None}
    if not dumps:
        return [], []
    world = max([_int(m.dump.get("world") if m.dump else None) for m in dumps.values()] + [max(dumps) + 1])
    index = {r: _index(m.flight) for r, m in dumps.items()}
    members = _members(dumps, world)
    blocked = {r: b for r, m in dumps.items() if (b := _blocked(m.flight)) is not None}
    waits = {
        r: [s for s in members(b.pg) if s != r and (s not in index or b.seq not in index[s].get(b.pg, {}))]
        for r, b in blocked.items()
    }
    no_dumps = _no_dumps(dumps, world, blocked, waits)
    errors: list[FlightFinding] = [*_mismatches(index, members), *(f for f in no_dumps if f.certain)]
    errors += _waits(index, blocked, waits, members)
    errors += _late(index, members)
    errors += [f for f in no_dumps if not f.certain]  # a guess comes after what the dumps show
    missing = [r for r in range(world) if r not in dumps]
    notes: list[FlightFinding] = []
    if missing and not any(isinstance(f, FrNoDump) for f in errors):
        notes.append(FrNoDump(None, missing, world))
    return errors, notes


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _index(entries: list[FrEntry]) -> dict[str, dict[int, FrEntry]]:
    out: dict[str, dict[int, FrEntry]] = defaultdict(dict)
    for e in entries:
        if not e.p2p:
            out[e.pg][e.seq] = e
    return out


def _members(dumps: dict, world: int):
    """group -> its ranks: from the dumps' pg_config where it names the group's ranks, else every rank."""
    known: dict[str, list[int]] = {}
    for m in dumps.values():
        for name, group in (m.dump.get("groups") or {}).items():
            ranks = group.get("ranks") if isinstance(group, dict) else None
            if ranks:
                known[str(name)] = [r for r in ranks if isinstance(r, int)]
    return lambda pg: known.get(pg, list(range(world)))


def _blocked(entries: list[FrEntry]) -> FrEntry | None:
    """Where a rank is: its first collective not completed where completions are known, else its last."""
    collectives = [e for e in entries if not e.p2p]
    if any(e.completed or e.state == "completed" for e in collectives):
        return next((e for e in collectives if not e.completed and e.state != "completed"), None)
    return collectives[-1] if collectives else None


def _signature(e: FrEntry) -> str:
    return f"{e.op} {e.sizes} {e.dtypes}"


def _split(groups: dict) -> tuple[list[int], list[int]]:
    """(the minority, the rest) of ranks grouped by what they did; with no minority, the first group."""
    sides = sorted(groups.values(), key=lambda rs: (len(rs), rs))
    culprits = sides[0]
    return culprits, sorted(r for side in sides[1:] for r in side)


def _mismatches(index: dict, members) -> list[FlightFinding]:
    out = []
    for pg in sorted({pg for per in index.values() for pg in per}):
        have = [r for r in members(pg) if r in index]
        common = set.intersection(*(set(index[r].get(pg, {})) for r in have)) if have else set()
        for seq in sorted(common):
            by: dict[str, list[int]] = defaultdict(list)
            for r in have:
                by[_signature(index[r][pg][seq])].append(r)
            if len(by) > 1:
                culprits, others = _split(by)
                a, b = index[culprits[0]][pg][seq], index[others[0]][pg][seq]
                out.append(FrMismatch(None, culprits, others, pg, seq, _signature(a), _signature(b), a.site, b.site))
                break
    return out


def _no_dumps(dumps: dict, world: int, blocked: dict, waits: dict) -> list[FrNoDump]:
    missing = [r for r in range(world) if r not in dumps]
    waiting = sorted(r for r, ws in waits.items() if set(ws) & set(missing))
    if not waiting:
        return []
    b = blocked[waiting[0]]
    certain = any(e.completed or e.state == "completed" for e in dumps[waiting[0]].flight)
    return [FrNoDump(None, missing, world, waiting, _at(b.op, b.seq, b.pg), b.site, certain)]


def _waits(index: dict, blocked: dict, waits: dict, members) -> list[FlightFinding]:
    out: list[FlightFinding] = []
    waiting = {r: ws for r, ws in waits.items() if any(s in index for s in ws)}
    done: set[int] = set()
    for r in sorted(waiting):
        if r in done:
            continue
        b = blocked[r]
        others = [s for s in waiting[r] if s in index]
        cycle = [s for s in others if s in blocked and blocked[s].pg != b.pg and r in waits.get(s, [])]
        if cycle:
            side = sorted(s for s in waiting if blocked[s].pg == b.pg and blocked[s].seq == b.seq)
            other = sorted(s for s in waiting if s not in side)
            ob = blocked[other[0]]
            if len(other) < len(side):
                side, other, b, ob = other, side, ob, b
            out.append(FrOrder(None, side, other, _at(b.op, b.seq, b.pg), b.site, _at(ob.op, ob.seq, ob.pg), ob.site))
            done.update(side + other)
            continue
        side = sorted(s for s in waiting if (blocked[s].pg, blocked[s].seq) == (b.pg, b.seq))
        behind = sorted({s for w in side for s in waiting[w] if s in index})
        count = b.seq - max((max(index[s].get(b.pg, {0: None})) for s in behind), default=0)
        if len(side) < len(behind):
            out.append(FrBehind(None, side, behind, "ahead", count, b.pg, b.seq, b.op, b.site))
        else:
            parted = _parted(index, behind, side, b.pg)
            out.append(FrBehind(None, behind, side, "short", count, b.pg, b.seq, b.op, b.site, parted))
        done.update(side + behind)
    return out


def _parted(index: dict, culprits: list[int], others: list[int], pg: str) -> tuple[int, str, str] | None:
    """The first collective of `pg` the culprits issued from another line than the others."""
    mine, theirs = index[culprits[0]].get(pg, {}), index[others[0]].get(pg, {})
    for seq in sorted(set(mine) & set(theirs)):
        if mine[seq].site != theirs[seq].site:
            return seq, mine[seq].site, theirs[seq].site
    return None


def _late(index: dict, members) -> list[FlightFinding]:
    out = []
    for pg in sorted({pg for per in index.values() for pg in per}):
        have = [r for r in members(pg) if r in index]
        if len(have) < 2:
            continue
        for seq in sorted(set.intersection(*(set(index[r].get(pg, {})) for r in have))):
            entries = {r: index[r][pg][seq] for r in have}
            first = min(e.created for e in entries.values())
            timeout = min((e.timeout_ms for e in entries.values() if e.timeout_ms), default=None)
            late = [r for r, e in entries.items() if timeout and e.created - first > timeout * 1000]
            if late:
                r = max(late, key=lambda x: entries[x].created)
                e = entries[r]
                on_time = sorted(x for x in have if x not in late)
                out.append(FrLate(None, r, on_time, pg, seq, e.op, (e.created - first) / 1e6, timeout / 1000, e.site))
                break
    return out
