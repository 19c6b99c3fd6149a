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

import functools
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ...wording import ranks_text
from ._entries import Flight, Texts
from ._findings import Finding
from ._logs import Logs

_NO_FRAME = "flight_recorder:"
_SPAN = 256  # sequence ids compared across ranks at a time


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
        they = "it" if len(self.ranks) == 1 else "they"
        return (
            f"{ranks_text(self.ranks)} left no Flight Recorder dump; {ranks_text(self.waiting)} stopped at {self.at} "
            f"({self.site}), which {they} may not have reached (their dumps do not say what completed)"
        )


@dataclass(frozen=True)
class _At:
    """A rank's place: one collective of a group."""

    pg: int  # codes (Texts)
    seq: int
    op: str
    site: str


def findings(logs: Logs) -> tuple[list[FlightFinding], list[FlightFinding]]:
    """(errors, notes) from the ranks' dumps."""
    dumps = {r: m for r, m in logs.ranks.items() if m.dump is not None}
    if not dumps:
        return [], []
    world = max([_int(m.dump.get("world") if m.dump else None) for m in dumps.values()] + [max(dumps) + 1])
    flights = {r: m.flight for r, m in dumps.items()}
    texts = logs.texts.texts
    members = _members(dumps, world, logs.texts)
    blocked = {r: at for r, f in flights.items() if (at := _blocked(f, texts)) is not None}
    cut = {r: _enqueued(m.dump, logs.texts) for r, m in dumps.items() if m.dump.get("cut") is True}
    for r, enqueued in cut.items():  # (its status says how far it got: past the entries its cut lost)
        b = blocked.get(r)
        if b is not None and enqueued.get(b.pg, 0) > b.seq:
            blocked[r] = _At(b.pg, enqueued[b.pg], "collective", _NO_FRAME + "0")
    waits = _waits_for(flights, blocked, members, cut)
    no_dumps = _no_dumps(flights, world, blocked, waits, texts)
    errors: list[FlightFinding] = [*_mismatches(flights, members, texts), *(f for f in no_dumps if f.certain)]
    errors += _waits(flights, blocked, waits, texts, cut)
    errors += _late(flights, members, texts)
    errors += [f for f in no_dumps if not f.certain]  # a guess comes after what the dumps show
    missing = [r for r in range(world) if r not in dumps]
    notes: list[FlightFinding] = []
    if missing and not any(isinstance(f, FrNoDump) for f in errors):
        notes.append(FrNoDump(None, missing, world))
    return errors, notes


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _members(dumps: dict, world: int, codes: Texts) -> Callable[[int], list[int]]:
    """group -> its ranks: from the dumps' pg_config where it names the group's ranks, else every rank."""
    known: dict[int, list[int]] = {}
    for m in dumps.values():
        for name, group in (m.dump.get("groups") or {}).items():
            ranks = group.get("ranks") if isinstance(group, dict) else None
            if ranks:
                known[codes.code(str(name))] = [r for r in ranks if isinstance(r, int)]
    return lambda pg: known.get(pg, list(range(world)))


def _blocked(flight: Flight, texts: list[str]) -> _At | None:
    row = flight.blocked()
    if row is None:
        return None
    pg, seq, op, site = (flight.column(name)[row] for name in ("pg", "seq", "op", "site"))
    return _At(int(pg), int(seq), texts[op], texts[site])


def _waits_for(flights: dict[int, Flight], blocked: dict[int, _At], members, cut: dict) -> dict[int, list[int]]:
    """Each blocked rank's group members that never issued the collective it is at (those without a dump too).
    A rank whose dump was cut short may have issued it after the cut: its dump's group status says so where
    it survived the cut (a pickle writes it first); else the rank is named only where no other rank is."""

    def never(s: int, pg: int, seq: int) -> bool | None:
        if s not in flights:
            return True
        if flights[s].row(pg, seq) is not None:
            return False
        if s not in cut:
            return True
        enqueued = cut[s].get(pg)
        return None if enqueued is None else seq > enqueued

    absent: dict[tuple[int, int], list[int]] = {}
    for b in blocked.values():
        if (b.pg, b.seq) not in absent:
            said = {s: never(s, b.pg, b.seq) for s in members(b.pg)}
            certain = [s for s, is_absent in said.items() if is_absent]
            absent[b.pg, b.seq] = certain or [s for s, is_absent in said.items() if is_absent is None]
    return {r: [s for s in absent[b.pg, b.seq] if s != r] for r, b in blocked.items()}


def _enqueued(dump: dict, texts: Texts) -> dict[int, int]:
    """group code -> the last collective its dump's status says was enqueued (what survived of it)."""
    status = dump.get("status")
    out = {}
    for name, group in status.items() if isinstance(status, dict) else ():
        last = group.get("last_enqueued_collective") if isinstance(group, dict) else None
        if isinstance(last, str) and last.isascii() and last.isdigit() and len(last) < 19:
            last = int(last)
        if isinstance(last, int) and not isinstance(last, bool):
            out[texts.code(str(name))] = last
    return out


def _split(groups: dict) -> tuple[list[int], list[int]]:
    """(the minority, the rest) of ranks grouped by what they did; with no minority, the first group."""
    sides = sorted(groups.values(), key=lambda rs: (len(rs), rs))
    culprits = sides[0]
    return culprits, sorted(r for side in sides[1:] for r in side)


def _common(flights: dict[int, Flight], members, pg: int) -> tuple[list[int], np.ndarray]:
    """(the group's ranks with a dump, the sequence ids each of them issued)."""
    have = [r for r in members(pg) if r in flights]
    if not have:
        return have, np.zeros(0, np.int64)
    return have, functools.reduce(np.intersect1d, (flights[r].of_group(pg)[0] for r in have))


def _table(flights: dict[int, Flight], have: list[int], pg: int, seqs: np.ndarray, name: str) -> np.ndarray:
    """A column at `seqs` of group `pg`, a row per rank of `have`."""
    return np.stack([flights[r].at_common(pg, seqs, name) for r in have])


def _groups(flights: dict[int, Flight], texts: list[str]) -> list[int]:
    """Every group some rank used, by name."""
    return sorted({pg for f in flights.values() for pg in f.groups()}, key=lambda pg: texts[pg])


def _spans(common: np.ndarray) -> Iterator[np.ndarray]:
    """The common sequence ids a few hundred at a time: a table of them for a thousand ranks stays small."""
    for at in range(0, len(common), _SPAN):
        yield common[at : at + _SPAN]


def _mismatches(flights: dict[int, Flight], members, texts: list[str]) -> list[FlightFinding]:
    out: list[FlightFinding] = []
    for pg in _groups(flights, texts):
        have, common = _common(flights, members, pg)
        for seqs in _spans(common):
            sigs = _table(flights, have, pg, seqs, "sig")
            differ = np.flatnonzero((sigs != sigs[0]).any(axis=0))
            if len(differ):
                break
        else:
            continue
        col = int(differ[0])
        by: dict[int, list[int]] = defaultdict(list)
        for r, sig in zip(have, sigs[:, col].tolist()):
            by[sig].append(r)
        culprits, others = _split(by)
        seq = int(seqs[col])
        a, b = (flights[side[0]].row(pg, seq) for side in (culprits, others))
        sig, site = flights[culprits[0]].column("sig"), flights[culprits[0]].column("site")
        others_sig, others_site = flights[others[0]].column("sig"), flights[others[0]].column("site")
        out.append(
            FrMismatch(
                None,
                culprits,
                others,
                texts[pg],
                seq,
                texts[sig[a]],
                texts[others_sig[b]],
                texts[site[a]],
                texts[others_site[b]],
            )
        )
    return out


def _no_dumps(flights: dict[int, Flight], world: int, blocked: dict, waits: dict, texts: list[str]) -> list[FrNoDump]:
    missing = [r for r in range(world) if r not in flights]
    waiting = sorted(r for r, ws in waits.items() if set(ws) & set(missing))
    if not waiting:
        return []
    b = blocked[waiting[0]]
    certain = flights[waiting[0]].any_done
    return [FrNoDump(None, missing, world, waiting, _at(b.op, b.seq, texts[b.pg]), b.site, certain)]


def _waits(
    flights: dict[int, Flight], blocked: dict[int, _At], waits: dict, texts: list[str], cut: dict
) -> list[FlightFinding]:
    out: list[FlightFinding] = []
    waiting = {r: ws for r, ws in waits.items() if any(s in flights for s in ws)}
    done: set[int] = set()
    for r in sorted(waiting):
        if r in done:
            continue
        b = blocked[r]
        others = [s for s in waiting[r] if s in flights]
        cycle = [s for s in others if s in blocked and blocked[s].pg != b.pg and r in waits.get(s, [])]
        if cycle:
            side = sorted(s for s in waiting if (blocked[s].pg, blocked[s].seq) == (b.pg, b.seq))
            other = sorted(s for s in waiting if s not in side)
            ob = blocked[other[0]]
            if len(other) < len(side):
                side, other, b, ob = other, side, ob, b
            at, others_at = _at(b.op, b.seq, texts[b.pg]), _at(ob.op, ob.seq, texts[ob.pg])
            out.append(FrOrder(None, side, other, at, b.site, others_at, ob.site))
            done.update(side + other)
            continue
        side = sorted(s for s in waiting if (blocked[s].pg, blocked[s].seq) == (b.pg, b.seq))
        behind = sorted({s for w in side for s in waiting[w] if s in flights})
        count = b.seq - max((max(flights[s].last_seq(b.pg), cut.get(s, {}).get(b.pg, 0)) for s in behind), default=0)
        pg = texts[b.pg]
        if len(side) < len(behind):
            out.append(FrBehind(None, side, behind, "ahead", count, pg, b.seq, b.op, b.site))
        else:
            parted = _parted(flights, behind, side, b.pg, texts)
            out.append(FrBehind(None, behind, side, "short", count, pg, b.seq, b.op, b.site, parted))
        done.update(side + behind)
    return out


def _parted(
    flights: dict[int, Flight], culprits: list[int], others: list[int], pg: int, texts: list[str]
) -> tuple[int, str, str] | None:
    """The first collective of `pg` the culprits issued from another line than the others."""
    mine, theirs = flights[culprits[0]], flights[others[0]]
    common = np.intersect1d(mine.of_group(pg)[0], theirs.of_group(pg)[0])
    sites, other_sites = mine.at_common(pg, common, "site"), theirs.at_common(pg, common, "site")
    differ = np.flatnonzero(sites != other_sites)
    if not len(differ):
        return None
    at = int(differ[0])
    return int(common[at]), texts[sites[at]], texts[other_sites[at]]


def _late(flights: dict[int, Flight], members, texts: list[str]) -> list[FlightFinding]:
    out: list[FlightFinding] = []
    for pg in _groups(flights, texts):
        have, common = _common(flights, members, pg)
        if len(have) < 2:
            continue
        for seqs in _spans(common):
            created = _table(flights, have, pg, seqs, "created")
            timeouts = _table(flights, have, pg, seqs, "timeout_ms")
            first = created.min(axis=0)
            timeout = np.where(timeouts > 0, timeouts, np.inf).min(axis=0)  # the shortest a rank gave (0: none)
            late = created - first > timeout * 1000
            cols = np.flatnonzero(late.any(axis=0))
            if len(cols):
                break
        else:
            continue
        col = int(cols[0])
        late_ranks = [r for r, is_late in zip(have, late[:, col].tolist()) if is_late]
        i = max(range(len(have)), key=lambda k: (late[k, col], created[k, col]))
        r, seq = have[i], int(seqs[col])
        row = flights[r].row(pg, seq)
        op, site = (texts[flights[r].column(name)[row]] for name in ("op", "site"))
        on_time = sorted(x for x in have if x not in late_ranks)
        late_s = (int(created[i, col]) - int(first[col])) / 1e6
        out.append(FrLate(None, r, on_time, texts[pg], seq, op, late_s, float(timeout[col]) / 1000, site))
    return out
