"""What one group of records says: the ranks that wrote "the same" record, each value agreed or spread, and
the ranks that stand apart (see _collapse for how records are grouped).

A record's values are the numbers, hex digests and addresses in its text (message and fields alike); a
value is named by the field it is in (`wait_us`), else by its place in the message (`#2`). A group written
by half of the expected ranks or fewer is kept whole: `[rank 17 only]`. Otherwise each value is judged over
the group:

  - a side that is a minority (fewer than half of the group) stands apart when its number is NaN/Inf where
    the others' are finite (or the reverse), or when its value differs from one that more than half of the
    group share and that is expected to agree: a hex digest (a checksum), an int but a duration's (a count,
    a step, the number in a node's name);
  - what the rest agree on is one value; numbers that differ are a spread (`lo..hi`, and for a duration
    `max@R`: who waited longest); digests with no majority are counted (`<16 values>`), addresses elided.

Text other than these values (a str field, the words of a message) is part of what makes records the same:
a rank that writes other words is in a group of its own.

The ranks that stand apart keep their records whole, marked with the values that set them apart; the folded
line names both sides of the first such value: `[ranks 0-16,18-1023: checksum=da41…; rank 17: checksum=77c0…]`.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...wording import ranks_text

_DURATION = re.compile(r"(?:_(?:us|ms|ns|s|sec|seconds)|time|wait)$")
MAX_LISTED_VALUES = 8  # distinct values a JSON object lists (past that: how many)
SHORT = 10  # a value in a mark longer than this is cut: `da416017…`


_HEX = re.compile(r"[0-9a-f]*[a-f][0-9a-f]*")


class Address(str):
    """An address (`0x7f..`): differs from rank to rank by nature, never a reason to mark one."""


class Digest(str):
    """A hex digest (a checksum): expected to agree where most agree."""


def value(token: str) -> Any:
    """A value as the type it reads as: int, float, Digest or Address."""
    if token.startswith("0x"):
        return Address(token)
    if token[0] == '"' or _HEX.fullmatch(token):
        return Digest(token)
    if token.lstrip("-") in ("nan", "inf") or "." in token or "e" in token or "E" in token:
        return float(token)
    return int(token)


@dataclass(frozen=True)
class Shape:
    """What every record of one text shares: the text between its values, and each value's name."""

    parts: tuple[str, ...]  # len(names) + 1 pieces of text around the values
    names: tuple[str, ...]  # the field a value is in, or `#i` (its place among the message's values)
    simple: tuple[bool, ...]  # the value is its field's whole value (`wait_us=4340`, not `node=relu2GradNode`)


LOOSE = Shape(("",), (), ())  # a text that is not a record in the reader's form


@dataclass(slots=True)
class Member:
    """One rank's record in a group."""

    rank: int
    ts: int
    head: int  # where its first line's `] [rank R] ` is (its text up to there: time, thread and site)
    shape: Shape
    values: Callable[[str], tuple[str, ...]]  # its body's values as written, cut out of its body's text
    body: int  # where its body starts in `text`
    text: bytes  # the whole record as glog text (shown as it is when it stands apart)

    def tokens(self) -> tuple[str, ...]:
        """Its values as written: cut when its group is judged, not kept while it waits for its peers (at
        1,024 ranks, hundreds of thousands of records wait)."""
        return self.values(self.text[self.body :].decode("utf-8", "replace"))


@dataclass
class Same:
    text: str  # as written (`05`, not `5`)


@dataclass
class Spread:
    lo: float
    hi: float
    max_rank: int | None  # who has the largest value (durations only)
    non_finite: tuple[str, ...] = ()  # NaN/Inf among the agreeing ranks (when neither side is a minority)


@dataclass
class Values:
    """Digests with no majority: text -> the ranks with it."""

    ranks: dict[str, list[int]]


class Elided:
    """Addresses that differ."""


@dataclass
class Apart:
    """A value on which some ranks stand apart from the rest."""

    name: str
    usual: Any  # what the rest have: Same / Spread / Values / Elided
    theirs: dict[int, str]  # rank -> its value as written


@dataclass
class Folded:
    """A group, judged: the agreeing ranks' folded record (`ranks` empty when the group is kept whole), the
    records that stand apart, and the expected ranks that wrote none."""

    ranks: list[int]
    first: Member | None  # the earliest agreeing record: its time, severity, thread, site and shape
    values: list[Any]  # Same / Spread / Values / Elided per value
    apart: list[Apart]
    whole: list[tuple[Member, str]]  # records kept whole, each with its mark (`only`, `differs: checksum=…`)
    missing: list[int]


_BY_TIME = operator.attrgetter("ts", "rank")  # (in C: a group of 1,024 members is sorted without a Python call each)


def fold(members: Sequence[Member], expected: int, missing: list[int]) -> Folded:
    """Judge a group (see the module's docstring): `expected` ranks should have written it, `missing` did not."""
    members = sorted(members, key=_BY_TIME)
    if members[0].shape is LOOSE:
        return Folded([], None, [], [], [(m, "") for m in members], missing)
    if 2 * len(members) <= expected:
        ranks = {m.rank for m in members}
        whole = [(m, "only" + (f", with {ranks_text(ranks - {m.rank})}" if len(ranks) > 1 else "")) for m in members]
        return Folded([], None, [], [], whole, missing)
    names = members[0].shape.names
    columns = list(zip(*[m.tokens() for m in members]))  # value k -> each member's text of it
    varies = {  # value -> each member's, read once (only where the group's texts of it differ)
        k: [value(t) for t in column] for k, column in enumerate(columns) if len(set(column)) > 1
    }
    odd = {k: found for k, values in varies.items() if (found := _odd(names[k], values))}  # -> members apart
    why: dict[int, list[str]] = {}
    for k, found in odd.items():
        for i in found:
            why.setdefault(i, []).append(label(names[k], columns[k][i]))
    at = [i for i in range(len(members)) if i not in why]
    kept = [members[i] for i in at]
    summary = []
    for k, column in enumerate(columns):
        read = varies.get(k)
        if why:
            column, read = [column[i] for i in at], None if read is None else [read[i] for i in at]
        summary.append(_summary(names[k], kept, column, read))
    apart = [Apart(names[k], summary[k], {members[i].rank: columns[k][i] for i in sorted(f)}) for k, f in odd.items()]
    whole = [(members[i], "differs: " + ",".join(why[i])) for i in sorted(why)]
    return Folded(sorted(m.rank for m in kept), kept[0], summary, apart, whole, missing)


def label(name: str, text: str) -> str:
    """`checksum=77c0a1b2…`, or a message's value by itself."""
    return _cut(text) if name.startswith("#") else f"{name}={_cut(text)}"


def _cut(text: str) -> str:
    return text if len(text) <= SHORT else text[: SHORT - 2] + "…"


def _finite(value: Any) -> bool:
    return type(value) is not float or math.isfinite(value)


def _odd(name: str, values: list[Any]) -> set[int]:
    """The positions of the values that stand apart (see the module's docstring)."""
    n = len(values)
    kind = type(values[0])
    if kind is Address:
        return set()
    if kind in (int, float):
        bad = {i for i, v in enumerate(values) if not _finite(v)}
        if bad:
            rest = set(range(n)) - bad
            return bad if 2 * len(bad) <= n else rest if 2 * len(rest) < n else set()
        if kind is float or _DURATION.search(name) or any(type(v) is float for v in values):
            return set()
    if n < 3:
        return set()
    counts: dict[Any, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    top, most = max(counts.items(), key=lambda kv: kv[1])
    return {i for i, v in enumerate(values) if v != top} if 2 * most > n else set()


def _summary(name: str, members: list[Member], tokens: Sequence[str], values: list[Any] | None) -> Any:
    """What the agreeing ranks say of a value (`tokens`: their texts of it; `values`: those read, None where
    all wrote the same text)."""
    if values is None or len(set(tokens)) == 1:
        return Same(tokens[0])
    if all(type(v) is Address for v in values):
        return Elided()
    finite = [(v, m.rank) for v, m in zip(values, members) if type(v) in (int, float) and _finite(v)]
    if len(finite) == len(values) or (finite and all(type(v) in (int, float) for v in values)):
        lo, (hi, at) = min(v for v, _ in finite), max(finite, key=lambda p: p[0])
        odd = tuple(sorted({t for t, v in zip(tokens, values) if not _finite(v)}))
        return Spread(lo, hi, at if _DURATION.search(name) else None, odd)
    by_text: dict[str, list[int]] = {}
    for text, m in zip(tokens, members):
        by_text.setdefault(text, []).append(m.rank)
    return Values(by_text)


# -- how a judged group reads ------------------------------------------------------------------------------------
def number_text(value: float) -> str:
    """A number of a spread, short: `4200` -> `4.2k`, `0.95123` -> `0.951`."""
    if type(value) is int and abs(value) < 10_000:
        return str(value)
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if type(value) is int and abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def spread_text(spread: Spread, *, compact: bool = False) -> str:
    """`lo..hi` with as many digits as tell them apart, then `max@R` for a duration (unless compact: one token)."""
    lo, hi = number_text(spread.lo), number_text(spread.hi)
    digits = 3
    while lo == hi and digits < 17:
        digits += 2
        lo, hi = f"{spread.lo:.{digits}g}", f"{spread.hi:.{digits}g}"
    text = f"{lo}..{hi}" + "".join(f",{t}" for t in spread.non_finite)
    return text + (f" max@{spread.max_rank}" if spread.max_rank is not None and not compact else "")


def summary_text(summary: Any, *, compact: bool = False) -> str:
    """A value's summary in text; `compact`: one token without spaces (to read back as one field's value)."""
    if type(summary) is Same:
        return summary.text
    if type(summary) is Spread:
        return spread_text(summary, compact=compact)
    if type(summary) is Values:
        return f"<{len(summary.ranks)}{'_' if compact else ' '}values>"
    return "0x…"


def summary_json(summary: Any) -> Any:
    if type(summary) is Same:
        agreed = value(summary.text)
        return agreed.strip('"') if isinstance(agreed, str) else agreed
    if type(summary) is Spread:
        out: dict[str, Any] = {"min": summary.lo, "max": summary.hi}
        if summary.max_rank is not None:
            out["max_rank"] = summary.max_rank
        if summary.non_finite:
            out["non_finite"] = list(summary.non_finite)
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


def body_text(folded: Folded, *, compact: bool = False) -> str:
    """The folded record's message and fields, each value its summary."""
    parts = folded.first.shape.parts
    out = [parts[0]]
    for summary, part in zip(folded.values, parts[1:]):
        out += [summary_text(summary, compact=compact), part]
    return "".join(out)


def tag_text(folded: Folded) -> str:
    """What the folded record says of its ranks: `ranks 0-1023`, with the first value some stand apart on and
    the ranks that wrote none."""
    text = ranks_text(folded.ranks)
    if folded.apart:
        first = folded.apart[0]
        theirs: dict[str, list[int]] = {}
        for rank, value in first.theirs.items():
            theirs.setdefault(value, []).append(rank)
        usual = summary_text(first.usual)
        usual = usual if type(first.usual) is Spread else _cut(usual)
        name = "" if first.name.startswith("#") else f"{first.name}="
        text += f": {name}{usual}; " + "; ".join(f"{ranks_text(r)}: {label(first.name, v)}" for v, r in theirs.items())
        if len(folded.apart) > 1:
            text += f" (and {len(folded.apart) - 1} more)"
    if folded.missing:
        text += f"; none from {ranks_text(folded.missing)}"
    return text
