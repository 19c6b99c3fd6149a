"""What one group of records says: the ranks that wrote "the same" record, each value agreed or spread, and
the ranks that stand apart (see _collapse for how records are grouped).

A group written by half of the expected ranks or fewer is kept whole: `[rank 17 only]`. Otherwise each
value (a field, or a number, hex digest or address in the message) is judged over the group:

  - a side that is a minority (fewer than half of the group) stands apart when it lacks a field the others
    have (or has one they lack), when its number is NaN/Inf where the others' are finite (or the reverse),
    or when its value differs from one that more than half of the group share and that is expected to
    agree: any str or JSON value (a checksum, a digest, a node name) and any int but a duration's;
  - what the rest agree on is one value; numbers that differ are a spread (`lo..hi`, and for a duration
    `max@R`: who waited longest); texts with no majority are counted (`<16 values>`), addresses elided.

The ranks that stand apart keep their records whole, marked with the values that set them apart; the folded
line names both sides of the first such value: `[ranks 0-16,18-1023: checksum=da41…; rank 17: checksum=77c0…]`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ... import format as fmt
from ...wording import ranks_text

ABSENT = object()  # a field a record does not have
_DURATION = re.compile(r"(?:_(?:us|ms|ns|s|sec|seconds)|time|wait)$")
MAX_LISTED_VALUES = 8  # distinct values a JSON object lists (past that: how many)
SHORT = 10  # a value in a mark longer than this is cut: `da416017…`


class Address(str):
    """An address in a message (`0x7f..`): differs from rank to rank by nature, never a reason to mark one."""


@dataclass(slots=True)
class Member:
    """One rank's record in a group: what its text says, decoded once."""

    rank: int
    ts: int
    severity: str
    stamp: str  # `mmdd hh:mm:ss.uuuuuu` as the output shows it
    tid: int | str
    file: str
    line: int
    parts: list[str]  # the message's text between its values
    tokens: list[str]  # the message's numbers, hex digests and addresses, in order, as written
    slots: list[Any]  # the same, as values
    fields: dict[str, Any]
    text: bytes  # the whole record as glog text (shown as it is when it stands apart)

    @property
    def event(self) -> str:
        return _join(self.parts, self.tokens)


@dataclass
class Same:
    value: Any


@dataclass
class Spread:
    lo: float
    hi: float
    max_rank: int | None  # who has the largest value (durations only)
    non_finite: list[Any] = field(default_factory=list)  # NaN/Inf among the agreeing ranks (a tie)


@dataclass
class Values:
    """Texts with no majority: value text -> the ranks with it."""

    ranks: dict[str, list[int]]


class Elided:
    """Addresses that differ."""


@dataclass
class Apart:
    """A value on which some ranks stand apart from the rest."""

    name: str  # a field's name, or `#i` for the message's i-th value
    usual: Any  # what the rest have: Same / Spread / Values / Elided
    theirs: dict[int, str]  # rank -> the text of its value


@dataclass
class Folded:
    """A group, judged: the agreeing ranks' folded line (`ranks` empty when the group is kept whole), the records
    that stand apart, and the expected ranks that wrote none."""

    ranks: list[int]
    first: Member | None  # the earliest agreeing record: its time, severity, thread and site
    parts: list[str]
    slots: list[Any]  # Same / Spread / Values / Elided per message value
    fields: dict[str, Any]  # name -> Same / Spread / Values / Elided
    apart: list[Apart]
    whole: list[tuple[Member, str]]  # records kept whole, each with its mark (`only`, `differs: checksum`)
    missing: list[int]


def fold(members: Sequence[Member], expected: int, missing: list[int]) -> Folded:
    """Judge a group (see the module's docstring): `expected` ranks should have written it, `missing` did not."""
    members = sorted(members, key=lambda m: (m.ts, m.rank))
    if 2 * len(members) <= expected:
        ranks = {m.rank for m in members}
        whole = [(m, "only" + (f", with {ranks_text(ranks - {m.rank})}" if len(ranks) > 1 else "")) for m in members]
        return Folded([], None, [], [], {}, [], whole, missing)
    names = _names(members)
    why: dict[int, list[str]] = {}
    columns = {name: [m.fields.get(name, ABSENT) for m in members] for name in names}
    columns.update({f"#{i}": [m.slots[i] for m in members] for i in range(len(members[0].slots))})
    odd = {name: found for name, values in columns.items() if (found := _odd(name, values))}
    for name, found in odd.items():
        for i in found:  # (a value in the message by itself: `differs: 499`)
            label = _cut(_text(columns[name][i]))
            why.setdefault(i, []).append(label if name.startswith("#") else f"{name}={label}")
    agree = [i for i in range(len(members)) if i not in why]
    kept = [members[i] for i in agree]
    summary = {name: _summary(name, [values[i] for i in agree], kept) for name, values in columns.items()}
    for i in range(len(members[0].slots)):
        if type(summary[f"#{i}"]) is Same:  # as written (`05`, not `5`)
            summary[f"#{i}"] = Same(Address(kept[0].tokens[i]))
    apart = [
        Apart(name, summary[name], {members[i].rank: _text(columns[name][i]) for i in sorted(found)})
        for name, found in odd.items()
    ]
    whole = [(members[i], "differs: " + ",".join(why[i])) for i in sorted(why)]
    return Folded(
        sorted(m.rank for m in kept),
        kept[0],
        members[0].parts,
        [summary[f"#{i}"] for i in range(len(members[0].slots))],
        {name: summary[name] for name in names},
        apart,
        whole,
        missing,
    )


def _names(members: Sequence[Member]) -> list[str]:
    """Every field name in the group, in the first record's order, then others' extras."""
    names = dict.fromkeys(members[0].fields)
    for m in members[1:]:
        if len(m.fields) != len(names) or any(k not in names for k in m.fields):
            names.update(dict.fromkeys(m.fields))
    return list(names)


def _key(value: Any) -> Any:
    """A hashable stand-in for a value: lists and dicts by their text."""
    return value if type(value) in (str, int, float, bool, Address) or value is None else fmt.value_text(value)


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def _finite(value: Any) -> bool:
    return type(value) is not float or math.isfinite(value)


def _odd(name: str, values: list[Any]) -> set[int]:
    """The positions of the values that stand apart (see the module's docstring)."""
    n = len(values)
    absent = {i for i, v in enumerate(values) if v is ABSENT}
    if absent and len(absent) != n:
        side = absent if 2 * len(absent) < n else set(range(n)) - absent if 2 * len(absent) > n else set()
        if side:
            return side
    present = [(i, v) for i, v in enumerate(values) if v is not ABSENT]
    if all(_is_number(v) for _, v in present):
        bad = {i for i, v in present if not _finite(v)}
        if bad and len(bad) != len(present):
            rest = {i for i, _ in present} - bad
            return bad if 2 * len(bad) <= len(present) else rest if 2 * len(rest) < len(present) else set()
        if not all(type(v) is int for _, v in present) or _DURATION.search(name):
            return set()
    if n < 3 or any(type(v) is Address for _, v in present):
        return set()
    counts: dict[Any, int] = {}
    for _, v in present:
        counts[_key(v)] = counts.get(_key(v), 0) + 1
    top, most = max(counts.items(), key=lambda kv: kv[1])
    if 2 * most <= n or most == len(present):
        return set()
    return {i for i, v in present if _key(v) != top}


def _summary(name: str, values: list[Any], members: list[Member]) -> Any:
    """What the agreeing ranks say of one value."""
    keys = {_key(v) for v in values}
    if len(keys) == 1:
        return Same(values[0])
    if all(type(v) is Address for v in values):
        return Elided()
    if all(_is_number(v) for v in values):
        finite = [(v, m.rank) for v, m in zip(values, members) if _finite(v)]
        odd = [v for v in values if not _finite(v)]
        if finite:
            lo, hi = min(v for v, _ in finite), max(finite, key=lambda p: p[0])
            return Spread(lo, hi[0], hi[1] if _DURATION.search(name) else None, odd)
    by_text: dict[str, list[int]] = {}
    for v, m in zip(values, members):
        by_text.setdefault(_text(v), []).append(m.rank)
    return Values(by_text)


def _text(value: Any) -> str:
    if value is ABSENT:
        return "(none)"
    return str(value) if type(value) is Address else fmt.value_text(value)


def _cut(text: str) -> str:
    return text if len(text) <= SHORT else text[: SHORT - 2] + "…"


def _join(parts: list[str], texts: list[str]) -> str:
    out = [parts[0]]
    for text, part in zip(texts, parts[1:]):
        out += [text, part]
    return "".join(out)


# -- how a judged group reads ------------------------------------------------------------------------------------
def number_text(value: float) -> str:
    """A number of a spread, short: `4200` -> `4.2k`, `0.95123` -> `0.951`."""
    if type(value) is int and abs(value) < 10_000:
        return str(value)
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if type(value) is int and abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def spread_text(spread: Spread) -> str:
    """`lo..hi` with as many digits as tell them apart, `max@R` for a duration."""
    lo, hi = number_text(spread.lo), number_text(spread.hi)
    digits = 3
    while lo == hi and digits < 17:
        digits += 2
        lo, hi = f"{spread.lo:.{digits}g}", f"{spread.hi:.{digits}g}"
    text = f"{lo}..{hi}"
    if spread.non_finite:
        text += "," + ",".join(sorted({fmt.value_text(v) for v in spread.non_finite}))
    return text + (f" max@{spread.max_rank}" if spread.max_rank is not None else "")


def summary_text(summary: Any, *, slot: bool = False) -> str:
    if type(summary) is Same:
        return _text(summary.value) if slot else fmt.value_text(summary.value)
    if type(summary) is Spread:
        return spread_text(summary)
    if type(summary) is Values:
        return f"<{len(summary.ranks)} values>"
    return "0x…"


def summary_json(summary: Any) -> Any:
    if type(summary) is Same:
        return str(summary.value) if type(summary.value) is Address else summary.value
    if type(summary) is Spread:
        out: dict[str, Any] = {"min": summary.lo, "max": summary.hi}
        if summary.max_rank is not None:
            out["max_rank"] = summary.max_rank
        if summary.non_finite:
            out["non_finite"] = summary.non_finite
        return out
    if type(summary) is Values:
        if len(summary.ranks) > MAX_LISTED_VALUES:
            return {"distinct": len(summary.ranks)}
        return {"values": {text: ranks_json(ranks) for text, ranks in summary.ranks.items()}}
    return {"varies": "address"}


def ranks_json(ranks: Sequence[int]) -> list[list[int]]:
    """Ranks as [first, last] runs: short at 1,024 ranks."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return runs


def message_text(folded: Folded) -> str:
    return _join(folded.parts, [summary_text(s, slot=True) for s in folded.slots])


def tag_text(folded: Folded) -> str:
    """What the folded line says of its ranks: `ranks 0-1023`, with the first value some stand apart on and
    the ranks that wrote none."""
    text = ranks_text(folded.ranks)
    if folded.apart:
        first = folded.apart[0]
        theirs: dict[str, list[int]] = {}
        for rank, value in first.theirs.items():
            theirs.setdefault(_cut(value), []).append(rank)
        name = "" if first.name.startswith("#") else f"{first.name}="
        usual = summary_text(first.usual, slot=first.name.startswith("#"))
        text += f": {name}{usual if type(first.usual) is Spread else _cut(usual)}; " + "; ".join(
            f"{ranks_text(r)}: {name}{v}" for v, r in theirs.items()
        )
        if len(folded.apart) > 1:
            text += f" (and {len(folded.apart) - 1} more)"
    if folded.missing:
        text += f"; none from {ranks_text(folded.missing)}"
    return text
