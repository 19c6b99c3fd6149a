"""What the tools say besides their result: counts in words, and warnings about their input on stderr."""

from __future__ import annotations

from ._block import Counts


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """`1 record`, `0 records`, `1,024 lines`: summaries are read by people, who notice `1 records`."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def skipped_text(counts: Counts) -> str:
    """`3 lines skipped (2 binary garbage, 1 truncated last line)`, `0 lines skipped`."""
    skipped = sum(counts.skipped.values())
    reasons = ", ".join(f"{n:,} {why}" for why, n in counts.skipped.most_common())
    return f"{plural(skipped, 'line')} skipped" + (f" ({reasons})" if skipped else "")
