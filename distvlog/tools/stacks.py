"""`distvlog stacks [PATH]`: every rank's Python stacks now, grouped by identical stack — `py-spy dump` for
the whole job, without ptrace.

It writes a request into the run directory (format.STACKS_REQUEST) and sends the ranks on this host
format.STACKS_WAKE_SIGNAL (whose default action is none); a thread the logger runs in every rank answers
within a second on other hosts, at once on this one, with a record in the rank's own file: the stack of each
thread, main thread first, and whether the main thread was running Python or blocked in C (an MPI or gloo
collective: it still answers, see distvlog/logger/_stacks.py). The rank goes on as before.

Exit 0 when every rank answered, 1 when some did not (named, with why: its process is gone, or no answer in
time), 2 on unusable input.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import format as fmt
from ..errors import InputError
from ..wording import plural, ranks_text, shown

WAIT_S = 5.0  # ranks on other hosts look at the request once a second
_POLL_S = 0.05
_HOST = socket.gethostname()
_SAFE_HOST = re.sub(r"[^\w.-]", "_", _HOST)  # (a request id is a field value and a file's content)


@dataclass
class RankFile:
    """A rank's file in the run directory and what its meta record says."""

    rank: int
    path: Path
    host: str | None
    pid: int | None

    @property
    def here(self) -> bool:
        return self.host == _HOST


@dataclass
class Answer:
    rank: int
    state: str  # format.STATE_BLOCKED / STATE_PYTHON, or "" (not known: the rank has another handler)
    where: str  # file:line of the main thread's innermost frame of the user's
    stacks: str  # every thread's, main thread first (`thread NAME:` lines, then its stack)


@dataclass
class Asked:
    """The answers to one request, and the ranks that gave none, with why."""

    answers: dict[int, Answer] = field(default_factory=dict)
    missing: dict[int, str] = field(default_factory=dict)


def rank_files(run_dir: Path) -> list[RankFile]:
    """The run's rank files (not forked children's), with the host and pid of their meta records."""
    found = []
    for path in sorted(run_dir.iterdir()):
        match = fmt.RANK_FILE_NAME.fullmatch(path.name)
        if not match or match.group(2):
            continue
        try:
            with open(path, "rb") as f:
                meta = fmt.meta_of_head(f.read(64 << 10)) or {}
        except OSError:
            continue
        pid = meta.get("pid")
        found.append(RankFile(int(match.group(1)), path, meta.get("host"), pid if type(pid) is int else None))
    return found


def ask(run_dir: Path, ranks: list[RankFile], wait_s: float = WAIT_S) -> Asked:
    """Every rank's stacks now: the request written, the ranks on this host woken, the answers read from
    their files as they come (at most `wait_s`)."""
    from .merge import alive

    request_id = f"{_SAFE_HOST}-{os.getpid()}-{time.time_ns()}"
    starts = {r.rank: _content_end(r.path) for r in ranks}
    _write_request(run_dir, request_id)
    asked = Asked()
    for r in ranks:
        if r.here and r.pid is not None:
            if not alive(r.pid):
                asked.missing[r.rank] = f"its process (pid {r.pid}) is gone"
                continue
            with contextlib.suppress(OSError):
                os.kill(r.pid, fmt.STACKS_WAKE_SIGNAL)
    waiting = [r for r in ranks if r.rank not in asked.missing]
    deadline = time.monotonic() + wait_s
    while waiting and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        for r in list(waiting):
            answer = _answer_in(r, starts[r.rank], request_id)
            if answer is not None:
                asked.answers[r.rank] = answer
                waiting.remove(r)
    for r in waiting:
        host = "" if r.here else f" (on {r.host or 'another host'})"
        asked.missing[r.rank] = f"no answer within {wait_s:g} s{host}"
    return asked


def _content_end(path: Path) -> int:
    """Where the rank's next record goes: its file's size less the NUL reserve the writer keeps after it."""
    from ..logger import content_size

    try:
        return content_size(path)
    except OSError:
        return 0


def _write_request(run_dir: Path, request_id: str) -> None:
    """The request file, replaced whole (a rank never reads half of it)."""
    tmp = run_dir / f".{fmt.STACKS_REQUEST}.{os.getpid()}"
    try:
        tmp.write_text(request_id + "\n")
        os.replace(tmp, run_dir / fmt.STACKS_REQUEST)
    except OSError as exc:
        raise InputError(f"{run_dir}: cannot write the request for stacks there ({exc.strerror})") from None


def _answer_in(r: RankFile, start: int, request_id: str) -> Answer | None:
    """The rank's answer to the request, if its file holds it past `start`."""
    from .read import from_glog, from_json

    try:
        with open(r.path, "rb") as f:
            f.seek(start)
            data = f.read().split(b"\0", 1)[0]
    except OSError:
        return None
    at = data.find(request_id.encode())
    if at < 0:
        return None
    begin = data.rfind(b"\n", 0, at) + 1
    first_end = data.find(b"\n", at)
    if first_end < 0:
        return None
    if r.path.suffix == ".jsonl":
        obj = fmt.parse_json(data[begin : first_end + 1])
        record = None if obj is None else from_json(obj, 0, r.rank)
    else:
        end = first_end + 1
        for _ in range(fmt.declared_count(data[begin:first_end])):
            end = data.find(b"\n", end) + 1
            if end == 0:
                return None  # (the rest is on its way)
        record = from_glog(data[begin:end], 0, r.rank)
    if record is None or record.fields.get(fmt.STACKS_ID) != request_id:
        return None
    state = record.fields.get(fmt.STACKS_STATE)
    stacks = record.event.partition("\n")[2]
    return Answer(r.rank, state if isinstance(state, str) else "", f"{record.file}:{record.line}", stacks)


def grouped(asked: Asked, brief: bool = False) -> list[str]:
    """The answers as lines, ranks with identical stacks (and state) as one group, the largest group first;
    then the ranks that did not answer. `brief`: ranks grouped by where their main thread is, without the
    stacks."""
    groups: dict[tuple[str, str], list[Answer]] = {}
    for answer in asked.answers.values():
        groups.setdefault((answer.state, answer.where if brief else answer.stacks), []).append(answer)
    lines = []
    for (state, stacks), members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0].rank)):
        how = f"{state}, " if state else ""
        lines.append(f"{ranks_text(a.rank for a in members)}: {how}main thread at {members[0].where}")
        lines += [] if brief else ["  " + line for line in stacks.splitlines()]
    by_why: dict[str, list[int]] = {}
    for rank, why in sorted(asked.missing.items()):
        by_why.setdefault(why, []).append(rank)
    lines += [f"{ranks_text(ranks)}: {why}" for why, ranks in by_why.items()]
    return lines


def run(args: argparse.Namespace) -> int:
    if not args.wait >= 0:
        raise InputError(f"--wait {args.wait}: expected a number of seconds")
    run_dir = resolve(args.path)
    ranks = rank_files(run_dir)
    if not ranks:
        raise InputError(f"{args.path}: no rank files in {run_dir}")
    asked = ask(run_dir, ranks, args.wait)
    head = f"stacks of {plural(len(ranks), 'rank')} ({run_dir}), grouped by identical stack:"
    sys.stdout.write(shown("\n".join([head, *grouped(asked)])) + "\n")
    return 1 if asked.missing else 0


def resolve(path: str) -> Path:
    """The run directory PATH names (a run directory, a log root's latest run; `latest`: the default root's)."""
    from .merge import resolve_run

    given = Path(path)
    if path != "latest" and not given.is_dir():
        raise InputError(f"{path}: {'not a directory' if given.exists() else 'no such directory'}")
    return resolve_run(path)


def add_run_argument(parser: argparse.ArgumentParser) -> None:
    """PATH, the run of a live job (shared with `distvlog watch`)."""
    parser.add_argument(
        "path", nargs="?", default="latest", metavar="PATH", help="a run directory or a log root (default: latest run)"
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "stacks",
        help="every rank's Python stacks now, grouped by identical stack (the ranks go on)",
        description=__doc__.split("\n\n")[1],
    )
    add_run_argument(p)
    p.add_argument(
        "--wait",
        type=float,
        default=WAIT_S,
        metavar="S",
        help=f"wait at most S seconds for answers (default {WAIT_S:g})",
    )
    p.set_defaults(run=run)
