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
from ._scan import Variant, windows

NCCL_RANK = re.compile(rb"\[(?:[^\]\n]* )?Rank (\d+)\]")
_TAG = np.frombuffer(fmt.RANK_TAG_OPEN.encode(), np.uint8)
_TAG_END = ord(fmt.RANK_TAG_CLOSE[0])


@dataclass
class Layout:
    """Where each record's parts are: the `] ` ending the prefix, the end of its first line, its tag."""

    insert_at: np.ndarray  # just after `] `: where our tag goes
    line_end: np.ndarray
    tag_rank: np.ndarray  # -1 when untagged


def bracket_after_prefix(
    data: np.ndarray, n: int, starts: np.ndarray, variant: Variant, newlines: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For lines starting at `starts`: whether `] ` follows the prefix on the same line, and where."""
    brackets = np.append(np.flatnonzero(data[:n] == ord("]")), n)  # n: past every line (the chunk may have none)
    line_end = newlines[np.searchsorted(newlines, starts)]
    at = brackets[np.searchsorted(brackets[:-1], starts + variant.prefix_len)]
    ok = (at < line_end) & (data[np.minimum(at + 1, n - 1)] == ord(" "))
    return ok, at + 2


def layout(data: np.ndarray, starts: np.ndarray, insert_at: np.ndarray, line_end: np.ndarray) -> Layout:
    rows = windows(data, insert_at)
    tagged = (rows[:, : len(_TAG)] == _TAG).all(axis=1)
    digits = rows[:, len(_TAG) :] - 48
    is_digit = (digits >= 0) & (digits <= 9)
    length = np.argmin(is_digit, axis=1)  # digits before the first non-digit
    tagged &= (length > 0) & (length < 10) & (rows[np.arange(len(rows)), len(_TAG) + length] == _TAG_END)
    value = np.zeros(len(rows), np.int64)
    for i in range(9):
        value = np.where(i < length, value * 10 + digits[:, i], value)
    return Layout(insert_at, line_end, np.where(tagged, value, -1))


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
