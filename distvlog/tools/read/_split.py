"""A job split across run directories: the ranks of one job that named their runs apart (distvlog before run
ids were agreed per job wrote one run per MPICH host proxy, per torchrun agent, per time zone).

A run that lacks ranks of its world size is such a part when sibling run directories in the same log root (a
folder the logger keeps its `latest` link or `.jobs` claims in: never a folder of unrelated directories),
created within SPLIT_WINDOW_S of it, hold exactly the missing ranks, each with the same world size.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

from ... import format as fmt

SPLIT_WINDOW_S = 30  # how far apart the parts' first files were created: the ranks of one job start together
_HEAD_BYTES = 4096
_ROOT_MARKS = ("latest", ".jobs")  # what the logger keeps in a log root beside its runs


def parts_holding(run_dir: Path, world_size: int, created_us: int, missing: set[int]) -> list[Path]:
    """The sibling run directories of `run_dir` that together hold exactly the `missing` ranks of a job of
    `world_size` started at `created_us` (epoch µs); [] when they do not."""
    found: dict[int, Path] = {}
    if not any(os.path.lexists(run_dir.parent / name) for name in _ROOT_MARKS):
        return []
    with contextlib.suppress(OSError), os.scandir(run_dir.parent) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name.startswith(".") or entry.path == str(run_dir) or not entry.is_dir(follow_symlinks=False):
                continue
            metas = _metas(Path(entry.path))
            ranks = {m["rank"] for m in metas}
            if metas and ranks <= missing - found.keys() and all(_fits(m, world_size, created_us) for m in metas):
                found.update(dict.fromkeys(ranks, Path(entry.path)))
    return sorted(set(found.values())) if found.keys() == missing else []


def _fits(meta: dict[str, Any], world_size: int, created_us: int) -> bool:
    created = meta.get("created_us")
    return (
        meta.get("world_size") == world_size
        and isinstance(created, int)
        and abs(created - created_us) <= SPLIT_WINDOW_S * 1_000_000
    )


def _metas(run_dir: Path) -> list[dict[str, Any]]:
    """The meta records of the rank files in `run_dir` (forked children's left out: they are no rank)."""
    out = []
    with contextlib.suppress(OSError), os.scandir(run_dir) as entries:
        for entry in entries:
            name = fmt.RANK_FILE_NAME.fullmatch(entry.name)
            if name and name.group(2) is None:
                meta = _head_meta(Path(entry.path))
                if meta is not None:
                    out.append(meta)
    return out


def _head_meta(path: Path) -> dict[str, Any] | None:
    """The meta record at the head of a regular file; never through a symlink, never a FIFO (it would block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        return fmt.meta_of_head(os.read(fd, _HEAD_BYTES)) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)
