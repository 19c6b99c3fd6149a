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
from collections.abc import Callable, Iterable
from typing import Any

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
    if tag is None:
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


def write_collapsed(
    args: argparse.Namespace, sources: list[Source], merge: KWayMerge, select: Callable, head: bytes
) -> tuple[int, str]:
    """`merge --collapse`: the merged records, folded, to the output; returns how many records were read
    into it and what the folding made of them (for merge's summary)."""
    ranks = {s.rank for s in sources if s.rank is not None}
    if getattr(select, "ranks", None) is not None:
        ranks &= set(select.ranks.tolist())
    collapse = Collapser(ranks)
    world = max((int((s.meta or {}).get("world_size") or 0) for s in sources), default=0) or None
    as_json = args.format == "jsonl"
    written = 0
    with output(args.output, [s.path for s in sources]) as fd:
        write_all(fd, head)
        for batch in merge.batches(select):
            released = []
            for which, i in zip(batch.which.tolist(), batch.index.tolist()):
                block = batch.blocks[which]
                released += collapse.add(block.text(i), int(block.ts[i]), int(block.rank[i]))
            written += len(batch)
            if released:
                write_all(fd, render(released, as_json, world))
        write_all(fd, render(collapse.flush(), as_json, world))
    return written, f"; {collapse.summary()}"
