"""Glog records written by other programs, rewritten into our form (distvlog.format: prefix, `[rank R]` tag).

Other writers differ in three ways: glog 0.7 puts the year in the prefix, c10d wraps the prefix in `[`,
and nobody writes our `[rank R]` tag. The rank of a record is its `[rank R]` tag, else `--rank-of`, else a
`[Rank N]` (NCCL / c10d) in its first line, else the file's rank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ... import format as fmt
from ._bytes import take
from ._scan import Variant, spans, windows

NCCL_RANK = re.compile(rb"\[(?:[^\]\n]* )?Rank (\d+)\]")
_TAG = np.frombuffer(fmt.RANK_TAG_OPEN.encode(), np.uint8)
_TAG_END = ord(fmt.RANK_TAG_CLOSE[0])
_TAG_SPAN = len(_TAG) + 10  # the tag's opening and up to 9 digits with the byte after them: 16, whole words
_OPEN_MASK = np.uint64((1 << 8 * len(_TAG)) - 1)
_OPEN = np.uint64(int.from_bytes(_TAG.tobytes(), "little"))


@dataclass
class Layout:
    """Where each record's parts are: the `] ` ending the prefix, the end of its first line, its tag."""

    insert_at: np.ndarray  # just after `] `: where our tag goes
    line_end: np.ndarray
    tag_rank: np.ndarray  # -1 when untagged


def bracket_after_prefix(
    data: np.ndarray, n: int, starts: np.ndarray, variant: Variant, line_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For lines starting at `starts` and ending at `line_end`: whether `] ` follows the prefix on the same
    line, and where."""
    after = starts + variant.prefix_len
    # Most locations (`tid file:line`) end within a window: one gather finds their `]`; only the lines
    # whose `]` lies further (or nowhere) pay for a scan of the chunk.
    hit = windows(data, after) == ord("]")
    first = np.argmax(hit, axis=1)
    at = after + first
    far = np.flatnonzero(~hit[np.arange(len(hit)), first])
    if len(far):
        brackets = np.append(np.flatnonzero(data[:n] == ord("]")), n)  # n: past every line
        at[far] = brackets[np.searchsorted(brackets[:-1], after[far])]
    ok = (at < line_end) & (data[np.minimum(at + 1, n - 1)] == ord(" "))
    return ok, at + 2


def tagged(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Whether a `[rank R]` tag starts at each offset."""
    return _tag(spans(data, _TAG_SPAN)[at].view(np.uint8).reshape(len(at), _TAG_SPAN))[0]


def layout(data: np.ndarray, starts: np.ndarray, insert_at: np.ndarray, line_end: np.ndarray) -> Layout:
    rows = windows(data, insert_at)
    tagged, length = _tag(rows)
    value = np.zeros(len(rows), np.int64)
    for i in range(9):
        value = np.where(i < length, value * 10 + (rows[:, len(_TAG) + i] - 48), value)
    return Layout(insert_at, line_end, np.where(tagged, value, -1))


def _tag(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Whether each row starts with a `[rank R]` tag, and the length of the digits after its opening. Column
    by column: several times faster than row reductions, and every record of our own files is checked."""
    digits = np.ones(len(rows), bool)
    length = np.zeros(len(rows), np.int64)
    for col in range(len(_TAG), _TAG_SPAN):
        digits &= rows[:, col] - np.uint8(48) <= 9
        length += digits
    end = rows[np.arange(len(rows)), len(_TAG) + np.minimum(length, 9)] == _TAG_END
    opening = (rows.view("<u8")[:, 0] & _OPEN_MASK) == _OPEN  # the first 8 bytes as one number: no row reduction
    return opening & (length > 0) & ~digits & end, length


def nccl_ranks(data: np.ndarray, n: int, starts: np.ndarray, line_end: np.ndarray) -> np.ndarray:
    """The N of a `[Rank N]` / `[PG 0 Rank N]` in each record's first line, -1 where there is none."""
    out = np.full(len(starts), -1, np.int64)
    raw = data[:n].tobytes()
    for match in NCCL_RANK.finditer(raw):
        r = int(np.searchsorted(starts, match.start(), "right")) - 1
        if r >= 0 and match.start() < line_end[r] and out[r] < 0:
            out[r] = int(match.group(1))
    return out


def normalise(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray, variant: Variant, lay: Layout, ranks: np.ndarray
) -> tuple[memoryview, np.ndarray]:
    """The records rewritten into our form (new bytes) and each record's start in them."""
    lead, year = variant.lead, 4 if variant.year else 0
    cuts = np.stack(
        [starts, starts + lead, starts + lead + 1, starts + lead + 1 + year, lay.insert_at, ends], axis=1
    ).ravel()
    data_cuts = np.concatenate(([0], cuts, [len(data)]))
    need_tag = lay.tag_rank < 0
    uniq, which = np.unique(np.where(need_tag, ranks, -1), return_inverse=True)
    tag_texts = [b"" if r < 0 else fmt.rank_tag(r).encode() for r in uniq.tolist()]
    tags = b"".join(tag_texts)
    tag_lens = [len(t) for t in tag_texts]
    tag_cuts = np.concatenate(([0], np.cumsum(tag_lens)))
    base = 1 + 6 * np.arange(len(starts))
    tag_elem = len(data_cuts) - 1 + which
    index = np.stack([base + 1, base + 3, tag_elem, base + 4], axis=1).ravel()
    out = take([data, np.frombuffer(tags or b" ", np.uint8)], [data_cuts, tag_cuts.astype(np.int64)], index)
    lengths = (ends - starts) - lead - year + np.asarray(tag_lens, np.int64)[which]
    new_starts = np.cumsum(lengths) - lengths
    return out, new_starts
