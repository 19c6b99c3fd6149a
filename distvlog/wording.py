"""How distvlog's messages word counts and groups of ranks: shared by the tools, the launcher's report and
DataParallel's checks, so a job of 256 ranks reads the same everywhere."""

from __future__ import annotations

from collections.abc import Iterable


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """`1 record`, `0 records`, `1,024 lines`: summaries are read by people, who notice `1 records`."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def ranks_text(ranks: Iterable[int]) -> str:
    """`rank 3`, `ranks 0,2,3`, `ranks 0-5,7`: how errors and reports name a group of ranks (runs of three or
    more as ranges, the form `--ranks` takes: short for a large job missing most of its ranks)."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    text = ",".join(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)) for run in runs)
    return f"rank {text}" if len(runs) == 1 and len(runs[0]) == 1 else f"ranks {text}"


# Control characters but newline and tab (C0, DEL and C1: what terminals act on) as `\x1b`.
_SHOWN = {c: f"\\x{c:02x}" for c in [*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)]}


def shown(text: str) -> str:
    """`text` as it may go to a terminal: logged text is anyone's, and an escape sequence in an exception's
    message must not recolour, retitle or clear the user's terminal. Newlines and tabs stay."""
    return text.translate(_SHOWN)


MAX_GROUPS = 4  # groups of ranks a summary names before it gives a range instead


def per_rank(counts: dict[int, int], notes: dict[int, str] | None = None) -> str:
    """Counts per rank in a line that stays short at 1,024 ranks: ranks with the same count as one range
    (`ranks 0-255: 20,000 each`), the others as exceptions (`rank 17: 19,998`), and past MAX_GROUPS groups
    the spread (`ranks 0-1023: 19,990 to 20,010`). `notes` adds what is worth saying about a rank (`2 lines
    skipped: torn`); ranks with a note are always named, the first MAX_GROUPS of them."""
    notes = dict(notes or {})
    groups: dict[int, list[int]] = {}
    for rank, n in sorted(counts.items()):
        groups.setdefault(n, []).append(rank)
    if len(groups) <= MAX_GROUPS:
        parts = []
        for n, ranks in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0])):
            note = notes.pop(ranks[0], None) if len(ranks) == 1 else None
            parts.append(f"{ranks_text(ranks)}: {n:,}" + (" each" if len(ranks) > 1 else f" ({note})" if note else ""))
    else:
        low, high = min(groups), max(groups)
        parts = [f"{ranks_text(counts)}: {low:,} to {high:,} ({sum(counts.values()):,} in all)"]
    noted = sorted(notes)
    parts += [f"rank {rank}: {notes[rank]}" for rank in noted[:MAX_GROUPS]]
    if len(noted) > MAX_GROUPS:
        parts.append(f"and {plural(len(noted) - MAX_GROUPS, 'more rank')} like these")
    return "; ".join(parts) if parts else "none"
