"""Whether the input files fit together, from the `distvlog-meta` records in them (run id, rank, world size, pid).

- One process's records in two files (a rank file and its run's merged timeline, a copy, a .gz of it)
  would be counted twice: an error naming both. A forked child's file (rank-R.<pid>.log) is another
  process: the same run and rank, its own pid.
- Files from several runs are read as asked (users compare runs on purpose), with a warning naming them.
- Ranks of a run that no file speaks for are named (a warning): a merge or a diff of 3 of 4 ranks is not
  the whole run. A merged timeline speaks for the processes its header lists (`Merged processes:`). When
  sibling run directories hold exactly those ranks, the job was split across runs (see `_split`): they
  are named.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import InputError
from ...format import RANK_FILE_NAME
from ...wording import plural, ranks_text
from ._notes import Warn
from ._split import parts_holding

if TYPE_CHECKING:
    from ._source import Source


def check(sources: list[Source], warn: Warn) -> None:
    holder: dict[tuple, Path] = {}
    files: dict[str, dict[Path, None]] = defaultdict(dict)  # run id -> its files (a dict: ordered, unique)
    world: dict[str, int] = defaultdict(int)
    ranks: dict[str, set[int]] = defaultdict(set)
    created: dict[str, int] = {}
    for source in sources:
        for meta in source.metas:
            run, rank, pid = str(meta.get("run_id")), meta["rank"], meta.get("pid")
            other = holder.setdefault((run, rank, pid), source.path)
            if other != source.path:
                raise InputError(
                    f"{other} and {source.path} both hold the records of rank {rank} (pid {pid}) of "
                    f"run {run}: they would be read twice; give only one of the two"
                )
            files[run].setdefault(source.path)
            world[run] = max(world[run], meta.get("world_size") if isinstance(meta.get("world_size"), int) else 0)
            ranks[run].add(rank)
            if isinstance(meta.get("created_us"), int):
                created[run] = min(created.get(run, meta["created_us"]), meta["created_us"])
    if len(files) > 1:
        warn(
            f"the input files are from {len(files)} different runs: "
            + "; ".join(f"{run} ({_some(list(paths))})" for run, paths in files.items())
        )
    if len(files) == 1:  # files without a meta record (foreign, cut short) speak for the rank they are of
        ranks[next(iter(files))].update(s.rank for s in sources if not s.metas and s.rank is not None)
    given = {path.parent for paths in files.values() for path in paths}
    read_as_one: set[Path] = set()
    for run, size in world.items():
        missing = sorted(set(range(size)) - ranks[run])
        first = next(iter(files[run]))
        if not missing or first.parent in read_as_one:
            continue
        parts = _split_parts(first, size, created.get(run), set(missing))
        if parts and given.issuperset(parts):
            read_as_one.update([first.parent, *parts])
            warn(f"{', '.join(str(p) for p in [first.parent, *parts])}: {_SPLIT}: read as one job")
            continue
        text = f"no log read from {ranks_text(missing)} of {size}" + (f" (run {run})" if len(files) > 1 else "")
        if parts:
            them = "it" if len(missing) == 1 else "them"
            text += (
                f"; {', '.join(str(p) for p in parts)} {'holds' if len(parts) == 1 else 'hold'} {them}: {_SPLIT}; "
                f"give {first.parent} and {'it' if len(parts) == 1 else 'them'} together"
            )
        warn(text)


_SPLIT = "one job split across run directories (its ranks named their runs apart: one per host, agent or time zone)"


def _split_parts(path: Path, size: int, created_us: int | None, missing: set[int]) -> list[Path]:
    """The sibling run directories that hold the missing ranks of the run of `path` (see `_split`)."""
    if created_us is None or not RANK_FILE_NAME.fullmatch(path.name):
        return []
    return parts_holding(path.parent, size, created_us, missing)


def _some(paths: list[Path]) -> str:
    return f"{paths[0]}" + (f" and {plural(len(paths) - 1, 'other file')}" if len(paths) > 1 else "")
