"""Which files a PATH argument means, and opening them (plain or gzip) as binary streams.

A PATH is a log file, a run directory (`rank-*.log`, `rank-*.jsonl`, `.gz` too) or a log root, which
stands for its latest run (the `latest` link, else the newest run directory). Bad paths raise InputError,
files that cannot be read as logs BadFile.
"""

from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ... import format as fmt
from ...errors import InputError

_RANK_FILE = re.compile(rf"^{fmt.RANK_FILE_NAME.pattern}(?:\.gz)?$")


class BadFile(InputError):
    """A file that cannot be read as a log (unreadable, empty, not a log): the tools skip it when others can be read."""


@dataclass(frozen=True)
class InputFile:
    """One input file, in the order tools read them (rank from its name when it has our layout)."""

    path: Path
    name_rank: int | None  # the R of rank-R[.pid].log, None for other names
    child_of: Path | None  # a forked child's file points at its parent's rank-R file

    @property
    def gz(self) -> bool:
        return self.path.name.endswith(".gz")


def _natural(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _rank_files(directory: Path) -> list[Path]:
    return sorted(
        (p for p in directory.iterdir() if _RANK_FILE.match(p.name) and p.is_file()), key=lambda p: _natural(p.name)
    )


def _latest_run(root: Path) -> Path | None:
    latest = root / "latest"
    if latest.is_dir():
        return latest.resolve()
    runs = [d for d in root.iterdir() if d.is_dir() and _rank_files(d)]
    return max(runs, key=lambda d: d.stat().st_mtime) if runs else None


def _expand(arg: str) -> list[Path]:
    path = Path(arg)
    if not path.exists():
        raise InputError(f"{arg}: no such file or directory")
    if not path.is_dir():
        return [path]
    try:
        files = _rank_files(path)
        if not files:
            run = _latest_run(path)
            files = _rank_files(run) if run else []
    except OSError as exc:
        raise InputError(f"{arg}: cannot list the directory ({exc.strerror})") from None
    if not files:
        raise InputError(f"{arg}: no distvlog logs here (no rank-*.log or rank-*.jsonl, no run directory)")
    return files


def resolve_inputs(args: list[str]) -> list[InputFile]:
    """The files the PATH arguments name, each once (through links too), in argument order (a directory's
    files by name)."""
    seen: set = set()
    paths: list[Path] = []
    for arg in args:
        for path in _expand(arg):
            try:
                key: object = (path.stat().st_dev, path.stat().st_ino)
            except OSError:
                key = path.resolve()
            if key not in seen:
                seen.add(key)
                paths.append(path)
    if not paths:
        raise InputError("no input files")
    named = {(p.parent.resolve(), m.group(1), m.group(2)): p for p in paths if (m := _RANK_FILE.match(p.name))}
    files = []
    for path in paths:
        match = _RANK_FILE.match(path.name)
        parent = None
        if match and match.group(2):  # rank-R.<pid>.log: a forked child shares its parent's clock
            parent = named.get((path.parent.resolve(), match.group(1), None))
        files.append(InputFile(path, int(match.group(1)) if match else None, parent))
    return files


def open_input(file: InputFile) -> tuple[BinaryIO, int]:
    """The file opened for reading (decompressed when .gz) and its size on disk."""
    try:
        raw = open(file.path, "rb")  # noqa: SIM115 (the caller closes it)
        size = os.fstat(raw.fileno()).st_size
    except OSError as exc:
        raise BadFile(f"{file.path}: cannot read ({exc.strerror})") from None
    if size == 0:
        raw.close()
        raise BadFile(f"{file.path}: empty file")
    if file.gz:
        return gzip.GzipFile(fileobj=raw, mode="rb"), size
    return raw, size


def parse_rank_of(specs: list[str] | None) -> dict[str, int]:
    """`--rank-of FILE=R` options as {FILE: R}; FILE matches a path as given, resolved, or its name."""
    out: dict[str, int] = {}
    for spec in specs or ():
        name, sep, rank = spec.rpartition("=")
        if not sep or not name or not rank.isdigit():
            raise InputError(f"--rank-of {spec!r}: expected FILE=RANK with a non-negative integer rank")
        out[name] = int(rank)
    return out


def rank_given(rank_of: dict[str, int], path: Path) -> int | None:
    for key in (str(path), str(path.resolve()), path.name):
        if key in rank_of:
            return rank_of[key]
    return None
