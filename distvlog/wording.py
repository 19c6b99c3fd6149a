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
