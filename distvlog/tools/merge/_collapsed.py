"""How a collapsed timeline reads: glog text or JSON lines, a judged group (_fold) at a time.

Text: a folded record is one glog record whose rank tag names its ranks and what sets any apart
(`[ranks 0-1023]`, `[ranks 0-1,3-15: nan=0; rank 2: nan=2048]`), its message and fields each as the one value
all agree on or their spread. A record kept whole is its own text with a marked tag: `[rank 17 only]`,
`[rank 2 differs: nan=2048]`. JSON lines: one object per folded record (`ranks` as [first, last] runs,
`fields` each a value or `{min, max[, max_rank]}` / `{values: {text: ranks}}` / `{distinct: N}`), and a
record kept whole as merge writes it, with its `mark`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from ... import format as fmt
from ..output import output, write_all
from ..read import Source, from_glog
from ._collapse import Collapser
from ._fold import Folded, Member, body_text, ranks_json, summary_json, tag_text
from ._kway import KWayMerge


def text(folded: Folded) -> bytes:
    out = []
    if folded.first is not None:
        first = folded.first
        tail = f"] [{tag_text(folded)}] {body_text(folded)}".encode("utf-8", "backslashreplace")
        out.append(first.text[: first.head] + tail)
    out += [marked(member, mark) for member, mark in folded.whole]
    return b"".join(out)


def marked(member: Member, mark: str) -> bytes:
    """The record's own text, its rank tag saying why it stands apart: `[rank 17 only]`."""
    tag = fmt.RANK_TAG_PATTERN.search(member.text)
    if tag is None or not mark:
        return member.text
    return b"%s] [rank %d %s] %s" % (member.text[: tag.start()], member.rank, mark.encode(), member.text[tag.end() :])


def json(folded: Folded, world: int | None = None) -> bytes:
    out = []
    if folded.first is not None:
        first = folded.first
        body = fmt.split_body(body_text(folded, compact=True).partition("\n")[0])
        head = fmt.parse_glog(first.text[: first.head].decode("utf-8", "replace") + "] ")
        fields: dict[str, Any] = dict(body.fields)
        for name, simple, summary in zip(first.shape.names, first.shape.simple, folded.values):
            if simple:
                fields[name] = summary_json(summary)
        obj: dict[str, Any] = {
            fmt.TS: first.ts,
            fmt.SEVERITY: head.severity,
            "ranks": ranks_json(folded.ranks),
            "count": len(folded.ranks),
            fmt.TID: head.tid,
            fmt.FILE: head.file,
            fmt.LINE: head.line,
            fmt.EVENT: body.message,
            "fields": fields,
        }
        if folded.apart:
            obj["apart"] = [{"value": a.name, "usual": summary_json(a.usual), "ranks": a.theirs} for a in folded.apart]
        if folded.missing:
            obj["missing"] = ranks_json(folded.missing)
        out.append(fmt.json_record(obj))
    for member, mark in folded.whole:
        record = from_glog(member.text, member.ts, member.rank)
        out.append(fmt.json_record({**record.as_json(world), "mark": mark}))
    return b"".join(out)


def render(groups: Iterable[Folded], as_json: bool, world: int | None = None) -> bytes:
    return b"".join(json(f, world) if as_json else text(f) for f in groups)


def folded_batches(merge: KWayMerge, select: Callable, collapse: Collapser) -> Iterator[list[Folded]]:
    """The merged records fed to the folding, a batch at a time: what each batch released; the rest at the end."""
    for batch in merge.batches(select):
        released = []
        for text, ts, rank in batch.records():
            released += collapse.add(text, ts, rank)
        yield released
    yield collapse.flush()


def write_collapsed(
    args: argparse.Namespace, sources: list[Source], merge: KWayMerge, select: Callable, head: bytes
) -> tuple[int, str]:
    """`merge --collapse`: the merged records, folded, to the output; how many records were read into it and
    what the folding made of them (for merge's summary)."""
    ranks = {s.rank for s in sources if s.rank is not None}
    if getattr(select, "ranks", None) is not None:
        ranks &= set(select.ranks.tolist())
    collapse = Collapser(ranks)
    world = max((int((s.meta or {}).get("world_size") or 0) for s in sources), default=0) or None
    with output(args.output, [s.path for s in sources]) as fd, _fewer_collections():
        write_all(fd, head)
        for released in folded_batches(merge, select, collapse):
            if released:
                write_all(fd, render(released, args.format == "jsonl", world))
    return collapse.records, f"; {collapse.summary()}"


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Python's cycle collector run less often while this command folds: folding makes and drops several
    objects a record, none of them in a cycle, and the collections it set off were ~13% of `merge
    --collapse`'s CPU (64 ranks, bench_collapse)."""
    before = gc.get_threshold()
    gc.set_threshold(100_000, 50, 1000)
    try:
        yield
    finally:
        gc.set_threshold(*before)


class Row(NamedTuple):
    """A line of a collapsed timeline for a table: its time, where, who wrote it, what; `marked` when it sets
    ranks apart."""

    stamp: str
    site: str
    who: str
    text: str
    marked: bool


def rows(folded: Folded) -> list[Row]:
    """A judged group as table rows: its folded record, then each record kept whole (first lines only)."""
    out = []
    if folded.first is not None:
        body = body_text(folded).partition("\n")[0]
        out.append(Row(*_head(folded.first), tag_text(folded), body, bool(folded.apart or folded.missing)))
    for member, mark in folded.whole:
        body = member.text.decode("utf-8", "replace").partition("\n")[0]
        tag = fmt.RANK_TAG_PATTERN.search(body.encode())
        out.append(Row(*_head(member), f"rank {member.rank} {mark}", body[tag.end() :] if tag else body, True))
    return out


def _head(member: Member) -> tuple[str, str]:
    head = member.text[: member.head].decode("utf-8", "replace")
    return head[1:21], head.rsplit(" ", 1)[-1]


def stands_apart(folded: Folded) -> bool:
    """Whether ranks differ in this group (a value apart, a record kept whole but for a rank alone in the
    job) or it holds an error."""
    severe = any(m.text[:1] in b"EF" for m, _ in folded.whole) or (
        folded.first is not None and folded.first.text[:1] in b"EF"
    )
    return severe or bool(folded.apart) or any(mark.startswith("differs") for _, mark in folded.whole)


def around(groups: Iterable[Folded], before: int, after: int) -> list[Row]:
    """The rows around the first group that stands apart: `before` rows before it, `after` from it on; none
    when ranks agree throughout. Reads no further than that."""
    kept: deque[Row] = deque(maxlen=before)
    out: list[Row] = []
    for folded in groups:
        if out:
            out += rows(folded)
        elif stands_apart(folded):
            out = [*kept, *rows(folded)]
        else:
            kept.extend(rows(folded))
        if len(out) >= before + after:
            break
    return out[: before + after]
