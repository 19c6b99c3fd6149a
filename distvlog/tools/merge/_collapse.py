"""`merge --collapse`: records that ranks wrote in common, folded into one line as the merged stream goes by.

Records are "the same" when they have the same severity and site (file:line), the same text once its values
(numbers, hex digests, addresses: in the message and the fields alike, so `relu2GradNode` is `relu#GradNode`)
are set aside, the same `step`, `bucket`, `epoch` or `iteration`, and the same position among each rank's
records so alike: the k-th `allreduce end` of step 5 bucket 0 on every rank is one group. A record's text is
cut into its values once per distinct body (digits aside); _fold judges a group once it is released.

Groups are released in the order their first record came, each when every expected rank has written to
it, or once WINDOW_PER_RANK records per rank have passed since it opened (a record that never finds its
peers is shown as such), or when the stream ends. So memory is the records of that window at most: the
number of ranks times a small window, never the whole input. A rank is expected until a window passes
without a record from it (a rank that died is not waited for at every record after).

Any record the reader yields can be folded: ours, JSON lines, or other programs' glog (whose values are
mostly numbers in the message: `Iteration 500, loss = 2.31` folds with its peers'). In `--follow`, a group
also goes once it has waited `wait_s` seconds: the live view lags behind the slowest rank by that much.
"""

from __future__ import annotations

import itertools
import operator
import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import NamedTuple

from ...wording import plural
from ._fold import LOOSE, Folded, Member, Shape, fold

WINDOW_PER_RANK = 256
IDENTITY = ("step", "bucket", "epoch", "iteration", "iter")  # fields that say which "same" record it is
# Cut bodies kept: ranks mostly write the same bytes after the rank tag. A few steps of 1,024 ranks' records;
# more (64k) held ~40 MB more at 1,024 ranks for no more hits.
CACHE_BODIES = 1 << 14
_PREFIX = re.compile(rb"[IWEF][0-9]{4} [0-9:.]{15} +\S+ (.*?:[0-9]+)\] (?:\[rank [0-9]+\] )?")
_VALUE = re.compile(
    r"(?=[-0-9a-fin\"])"  # (what a value can start with: most places are rejected at once)
    r"(0x[0-9a-fA-F]+"  # an address
    r"|\"[0-9a-f]{8,}\""  # a hex digest quoted (as a writer quotes one of digits only: it reads as a str)
    r"|(?<![\w.])-[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"  # a negative number
    r"|\b[0-9a-f]{8,}\b"  # a hex digest (or a long int)
    r"|[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"  # a number
    r"|-?\b(?:nan|inf)\b(?!=))"  # (not a field named so: `nan=0`)
)
_SPACES = re.compile(r"  +")
# The field a value is in: ` NAME=` and no space after it (a field's value has none, but in quotes).
_FIELD_START = re.compile(r'(?:^| |\n|\0)([^\s="\0]+)=[^\s]*$')


# Digits 2-9 as 1: _VALUE finds the same values at the same places in a body so masked, as it treats every
# digit alike but for the 0 of `0x`. Ranks mostly write bodies that differ only in such digits (norms, times,
# losses), so bodies masked alike are cut once.
_MASK = bytes.maketrans(b"23456789", b"11111111")


class _Cut(NamedTuple):
    """How the bodies masked alike are cut: their shape, their values (cut out of the decoded body), the part
    of the group key their text makes, and the values that say which record of a kind it is."""

    shape: Shape
    values: Callable[[str], tuple[str, ...]]
    key: str
    identity: Callable[[str], tuple[str, ...]] | None  # (None: no such value, no body to decode for the key)


def _getter(places: list[slice]) -> Callable[[str], tuple[str, ...]]:
    """The texts at `places`, as a tuple (in C: itemgetter, which gives a tuple from two places on)."""
    if len(places) >= 2:
        return operator.itemgetter(*places)
    return (lambda text: (text[places[0]],)) if places else (lambda text: ())


_NONE = _getter([])


class Decoder:
    """Records (glog text in our form, as the reader yields them: other programs' and JSON lines rewritten
    into it) into Members and their group keys. Ranks write bodies that differ only in digits, and bodies of
    one shape: each is cut once (bounded caches)."""

    def __init__(self) -> None:
        self._cuts: dict[bytes, _Cut] = {}
        self._shapes: dict[tuple[str, ...], tuple[Shape, tuple[int, ...]]] = {}

    def __call__(self, text: bytes, ts: int, rank: int) -> tuple[tuple, Member]:
        match = _PREFIX.match(text)
        if match is None:  # not a record in the reader's form: shown as it is, folded with nothing
            return (text, rank), Member(rank, ts, 0, LOOSE, _NONE, 0, text)
        start = match.end()
        body = text[start:]
        masked = body.translate(_MASK)
        cut = self._cuts.get(masked)
        if cut is None:
            if len(self._cuts) >= CACHE_BODIES:
                self._cuts.clear()
            cut = self._cuts[masked] = self._cut(body)
        key = (cut.key,) if cut.identity is None else (cut.key, *cut.identity(body.decode("utf-8", "replace")))
        return (text[0], match.group(1), key), Member(rank, ts, match.end(1), cut.shape, cut.values, start, text)

    def _cut(self, body: bytes) -> _Cut:
        pieces = _VALUE.split(body.decode("utf-8", "replace"))  # text, value, text, ..., text
        parts, bounds = tuple(pieces[0::2]), list(itertools.accumulate(map(len, pieces)))
        found = self._shapes.get(parts)
        if found is None:
            if len(self._shapes) >= CACHE_BODIES:
                self._shapes.clear()
            found = self._shapes[parts] = _shape(parts)
        shape, identity = found
        places = list(map(slice, bounds[0::2], bounds[1::2]))
        # (padding that a value's width changes, as in the meta record's clocks, does not make another record)
        key = f"{len(parts)}\0" + _SPACES.sub(" ", "\0".join(parts))  # (a body's own NUL joins no two counts)
        return _Cut(shape, _getter(places), key, _getter([places[k] for k in identity]) if identity else None)


def _shape(parts: tuple[str, ...]) -> tuple[Shape, tuple[int, ...]]:
    """Each value's name (the field it is in, else its place in the message) and whether it is its field's
    whole value; which values say which record of a kind it is (IDENTITY)."""
    names, simple = [], []
    before = ""
    for k, part in enumerate(parts[:-1]):
        before = (before + "\0" + part)[-200:]
        field = _FIELD_START.search(before)
        names.append(field.group(1) if field else f"#{k}")
        after = parts[k + 1]
        simple.append(bool(field) and before.endswith("=") and (not after or after[0] in " \n"))
    identity = tuple(k for k, name in enumerate(names) if name in IDENTITY and simple[k])
    return Shape(parts, tuple(names), tuple(simple)), identity


class _Positions:
    """Which occurrence of a key a rank is at: counts forgotten once unused for a window or two, so they
    stay bounded however long the run. A dict per rank: a window holds hundreds of thousands of keys at
    1,024 ranks, and a (rank, key) pair for each would be ~30 MB more."""

    def __init__(self, span: int) -> None:
        self.span, self.left = span, span
        self.new: dict[int, dict[tuple, int]] = {}
        self.old: dict[int, dict[tuple, int]] = {}

    def next(self, rank: int, key: tuple) -> int:
        counts = self.new.get(rank)
        if counts is None:
            counts = self.new[rank] = {}
        k = counts.get(key)
        if k is None:
            k = self.old[rank].get(key, 0) if rank in self.old else 0
        counts[key] = k + 1
        self.left -= 1
        if self.left <= 0:
            self.old, self.new, self.left = self.new, {}, self.span
        return k


class _Group:
    __slots__ = ("members", "opened", "since")

    def __init__(self, opened: int, since: float) -> None:
        self.members: list[Member] = []
        self.opened, self.since = opened, since


class Collapser:
    """Feed records in the merged order (`add`); it returns the groups released, judged, in the order they began."""

    def __init__(
        self, ranks: Iterable[int], *, window_per_rank: int = WINDOW_PER_RANK, wait_s: float | None = None
    ) -> None:
        self.decode = Decoder()
        self.window_per_rank, self.wait_s = window_per_rank, wait_s
        self.seen = 0
        self.last: dict[int, int] = dict.fromkeys(ranks, 0)  # rank -> when it last wrote (records seen then)
        self.expected = len(self.last)
        self.window = window_per_rank * max(1, len(self.last))
        self._recount = 0
        self._groups: dict[tuple, _Group] = {}
        self._order: deque[tuple] = deque()
        self._positions = _Positions(self.window)
        self.records = self.folded = self.whole = 0

    def add(self, text: bytes, ts: int, rank: int) -> list[Folded]:
        key, member = self.decode(text, ts, rank)
        self.seen += 1
        self.records += 1
        if rank not in self.last:
            self.expected += 1
            self.window = self.window_per_rank * len(self.last)
        self.last[rank] = self.seen
        gid = (key, self._positions.next(rank, key))
        group = self._groups.get(gid)
        if group is None:
            group = self._groups[gid] = _Group(self.seen, time.monotonic() if self.wait_s is not None else 0.0)
            self._order.append(gid)
        group.members.append(member)
        self._recount -= 1
        if self._recount <= 0:  # (every so often: a pass over the ranks)
            self._recount = self.window // 4
            self.expected = len(self._active())
        return self._release(False) if len(group.members) >= self.expected or self._due() else []

    def _active(self) -> list[int]:
        since = self.seen - self.window
        return [rank for rank, at in self.last.items() if at > since]

    def _due(self) -> bool:
        return bool(self._order) and self.seen - self._groups[self._order[0]].opened > self.window

    def _release(self, everything: bool, now: float | None = None) -> list[Folded]:
        out = []
        while self._order:
            group = self._groups[self._order[0]]
            if not (
                everything
                or len(group.members) >= self.expected
                or self.seen - group.opened > self.window
                or (now is not None and now - group.since >= self.wait_s)
            ):
                break
            del self._groups[self._order.popleft()]
            out.append(self._judge(group))
        return out

    def _judge(self, group: _Group) -> Folded:
        present = {m.rank for m in group.members}
        missing = [] if len(present) >= self.expected else sorted(set(self._active()) - present)
        folded = fold(group.members, max(self.expected, len(present)), missing)
        self.folded += bool(folded.ranks)
        self.whole += len(folded.whole)
        return folded

    def expire(self, now: float) -> list[Folded]:
        """The groups that have waited `wait_s` seconds (and those before them)."""
        return self._release(False, now) if self.wait_s is not None else []

    def flush(self) -> list[Folded]:
        """The stream has ended: every group left."""
        return self._release(True)

    def summary(self) -> str:
        return (
            f"collapsed into {plural(self.folded + self.whole, 'record')} ({plural(self.folded, 'folded record')}, "
            f"{plural(self.whole, 'record')} kept whole)"
        )
