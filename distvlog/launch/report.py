"""What `distvlog launch` says after the job: which rank failed and why (from the F record each rank's
crash hook wrote, traceback included), where a signal found each rank, which ranks ended without the
record of a script that ended (killed), the merged timeline, and where the files are."""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import format as fmt
from ..errors import InputError
from ..logger import PACKAGE_DIR
from ..tools.read import Record, open_sources
from ..wording import MAX_GROUPS, plural, ranks_text, shown

# Where a signal found a rank's main thread: the watcher's record (blocked in C) or the handler's (in Python).
_SIGNALLED = {fmt.BLOCKED_IN_C: "blocked in C", fmt.IN_PYTHON: "running Python"}
_END = fmt.own_record_pattern(fmt.END_RECORD)
_WEF = np.frombuffer(b"WEF", np.uint8)


def _say(text: str) -> None:
    print(f"distvlog launch: {shown(text)}", file=sys.stderr, flush=True)


@dataclass
class Unended:
    """A rank's own file (not a forked child's) without END_RECORD."""

    rank: int
    pid: int | None
    last: str  # its last record's time, as the timeline shows it


@dataclass
class Scan:
    """What the report tells from the run's files."""

    fatal: dict[int, Record] = field(default_factory=dict)  # per rank, its first F record: why it failed
    died: dict[int, Record] = field(default_factory=dict)  # per rank, how its process ended (its parent's record)
    stacks: dict[int, Record] = field(default_factory=dict)  # per rank, its threads' stacks when a signal came
    pids: dict[int, int] = field(default_factory=dict)  # per rank, its process's pid (its meta record's)
    signalled: dict[int, Record] = field(default_factory=dict)  # its first record of where a signal found it
    unended: list[Unended] = field(default_factory=list)
    checks: dict[int, Record] = field(default_factory=dict)  # per rank, its record of a failed DataParallel check


def scan(run_dir: Path) -> Scan:
    """One pass over the run's files for what the report needs (the F and W records, failed DataParallel
    checks, and whether each rank's
    file has its end record), block by block: logs may be large."""
    found = Scan()
    sources = open_sources([str(run_dir)])
    try:
        for source in sources:
            ended, last_ts = False, None
            while (block := source.next_block()) is not None:
                if len(block):
                    last_ts = int(block.ts[-1])
                    ended = ended or bool(block.matching(_END).any())
                for i in np.flatnonzero(np.isin(block.severity, _WEF)).tolist():
                    _note(found, block.record(i))
            if source.meta and source.file.child_of is None:
                found.pids[source.meta["rank"]] = source.meta.get("pid")
            if source.meta and source.file.child_of is None and not ended:
                last = "its header" if last_ts is None else _clock_text(last_ts, source.utc_offset_s or 0)
                found.unended.append(Unended(source.meta["rank"], source.meta.get("pid"), last))
    finally:
        for source in sources:
            source.close()
    return found


def _note(found: Scan, record: Record) -> None:
    if record.severity == "F" and record.file == fmt.OWN_FILE and record.event.startswith(fmt.DIED):
        found.died.setdefault(record.rank, record)
    elif record.severity == "F":
        found.fatal.setdefault(record.rank, record)
    elif record.severity == "E":
        if record.event.partition("\n")[0] == fmt.CHECK_FAILED:
            found.checks.setdefault(record.rank, record)
    elif any(marker in record.event.partition("\n")[0] for marker in _SIGNALLED):
        found.signalled.setdefault(record.rank, record)
    elif record.file == fmt.OWN_FILE and fmt.STACKS in record.event.partition("\n")[0]:
        found.stacks.setdefault(record.rank, record)


def _clock_text(ts_us: int, utc_offset_s: int) -> str:
    seconds, micros = divmod(ts_us, 1_000_000)
    return time.strftime("%H:%M:%S", time.gmtime(seconds + utc_offset_s)) + f".{micros:06d}"


def failure_text(record: Record) -> str:
    """`ValueError: boom (train.py:88)`: the last line of the traceback and where it was raised."""
    lines = [line.strip() for line in record.event.splitlines() if line.strip()]
    return f"{lines[-1] if lines else record.event} ({record.file}:{record.line})"


def signal_text(record: Record) -> str:
    """`SIGTERM found its main thread blocked in C at train.py:42`."""
    first = record.event.partition("\n")[0]
    state = next(state for marker, state in _SIGNALLED.items() if marker in first)
    return f"{first.split()[0]} found its main thread {state} at {record.file}:{record.line}"


def death_text(record: Record) -> str:
    """`exited with status 1` / `killed by SIGSEGV (status 139) at train.py:12` (the innermost frame of the
    crashing thread, when faulthandler printed its stack)."""
    first, _, stacks = record.event.partition("\n")
    how = first[len(fmt.DIED) :].lstrip(": ")
    crashed = re.search(r"^Current thread .*\n((?:\s+File .*\n?)+)", stacks, re.M)
    return how + _place(crashed.group(1) if crashed else "")


def stacks_text(record: Record) -> str:
    """`SIGTERM found its main thread at train.py:42 (...)`, from the faulthandler stacks the rank's parent
    logged: the main thread is the last one printed."""
    first, _, stacks = record.event.partition("\n")
    main = stacks.rstrip().rsplit("\n\n", 1)[-1]
    return f"{first.split()[0]} found its main thread{_place(main)} (every thread's stack is in its log)"


def _place(frames_text: str) -> str:
    """` at train.py:42`: the innermost frame of the user's code in faulthandler's frames (most recent call
    first), else the innermost frame; "" without frames."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', frames_text)
    users = [f for f in frames if not f[0].startswith(("<", sys.prefix, sys.base_prefix, PACKAGE_DIR))]
    frame = (users or frames or [None])[0]
    return f" at {Path(frame[0]).name}:{frame[1]}" if frame else ""


def _first_death(found: Scan) -> tuple[int, Record] | None:
    """The rank whose process died badly first; a death by the signal that stopped the whole job (its ranks
    said where it found them) blames no one."""
    stopping = {record.event.split()[0] for record in (*found.signalled.values(), *found.stacks.values())}
    deaths = [(r, d) for r, d in found.died.items() if d.fields.get(fmt.DIED_SIGNAL) not in stopping]
    return min(deaths, key=lambda death: death[1].ts) if deaths else None


def _merge(run_dir: Path) -> Path | None:
    """`distvlog merge RUN_DIR -o RUN_DIR/timeline.log`, through the CLI (its one-line summary included)."""
    from ..cli import main

    target = run_dir / "timeline.log"
    return target if main(["merge", str(run_dir), "-o", str(target)]) == 0 else None


def _say_grouped(lines: dict[int, str]) -> None:
    """One line per text, naming the ranks that share it: `ranks 0,2<text>`."""
    by_text: dict[str, list[int]] = {}
    for rank, text in sorted(lines.items()):
        by_text.setdefault(text, []).append(rank)
    for text, ranks in by_text.items():
        _say(f"{ranks_text(ranks)}{text}")


def _say_unended(unended: list[Unended]) -> None:
    """The ranks whose file lacks END_RECORD, in a job that failed without an F record. The launcher kills
    the other ranks with SIGKILL as soon as one dies, so of several the first to die cannot be told apart
    from the logs (MPICH's launcher prints its pid)."""
    if not unended:
        return
    if len(unended) == 1:
        rank = unended[0]
        _say(
            f"rank {rank.rank} (pid {rank.pid}): its log ends at {rank.last}, before its script ended: killed "
            "by a signal or os._exit()?"
        )
        return
    _say(
        f"{ranks_text(u.rank for u in unended)} ended before their scripts did: one was killed by a signal or "
        "called os._exit(), then the launcher killed the others (which one, the logs cannot tell; the "
        "launcher's message may give its pid)"
    )
    for rank in unended[:MAX_GROUPS]:  # (a killed job of 1,024 ranks: a few lines, not a screenful)
        _say(f"rank {rank.rank} (pid {rank.pid}): its log ends at {rank.last}")
    if len(unended) > MAX_GROUPS:
        _say(
            f"and {plural(len(unended) - MAX_GROUPS, 'more rank')} ({ranks_text(u.rank for u in unended[MAX_GROUPS:])})"
        )


def _no_files(run_dir: Path, code: int, started: float) -> None:
    """Nothing to merge: say so, and where the ranks logged if a script chose its own run id (`latest` of
    the log root then points at a run written since the job started)."""
    _say(
        f"no rank wrote a log file under {run_dir}: nothing to merge"
        + (f" (the job exited with code {code})" if code else "")
    )
    latest = run_dir.parent / "latest"
    other = latest.resolve() if latest.is_symlink() else None
    if other and other != run_dir and any(p.stat().st_mtime >= started for p in other.glob(f"{fmt.RANK_FILE_PREFIX}*")):
        _say(
            f"{latest} now points to {other}, written during this job: a script that passes run_id= to "
            f"dv.init() logs there instead (distvlog merge {other})"
        )
    else:
        _say(
            "a script that passes run_id= or log_dir= to dv.init() logs where those say, not here "
            '(see the ranks\' "logs to" lines)'
        )


def _say_check(found: Scan) -> set[int]:
    """A failed DataParallel check, from its own records: the culprits, once, with the reason and where they
    raised it, and the ranks that stopped because of them. Returns the ranks it accounts for."""
    culprit = next((r for rank, r in sorted(found.checks.items()) if "reason" in r.fields), None)
    if culprit is None:
        return set()
    culprits = [r for r in culprit.fields.get("culprits") or [] if isinstance(r, int)] or [culprit.rank]
    where = found.fatal.get(culprit.rank)
    at = f" ({where.file}:{where.line})" if where is not None else ""
    _say(
        f"{ranks_text(culprits)} failed DataParallel's check {culprit.fields.get('check')}{at}: "
        f"{culprit.fields.get('reason')}"
    )
    stopped = sorted(set(found.checks) - set(culprits))
    if stopped:
        _say(f"{ranks_text(stopped)} stopped because of {ranks_text(culprits)}")
    return set(found.checks) | set(culprits)


def after_run(run_dir: Path, ranks: int, code: int, started: float) -> int:
    """Report on a finished job (started at `started`, epoch s); the exit code is the job's (1 if it exited
    0 but a rank logged F)."""
    files = sorted(run_dir.glob(f"{fmt.RANK_FILE_PREFIX}*")) if run_dir.is_dir() else []
    if not files:  # a script that never logs is not a failure: the job's own exit code stands
        _no_files(run_dir, code, started)
        return code
    try:
        found = scan(run_dir)
        timeline = _merge(run_dir)
    except InputError as exc:
        _say(f"cannot read the run's logs: {exc}")
        return code or 1
    named = _say_check(found)
    failed = {rank: record for rank, record in found.fatal.items() if rank not in named}
    culprit = None if failed or named else _first_death(found)
    if culprit is not None:  # no exception: the first rank whose process died badly ended the job
        rank, record = culprit
        parent = record.fields.get(fmt.DIED_PARENT)  # (the pid in the MPI launcher's own banner)
        pids = f"pid {found.pids.get(rank)}" + (f"; its parent, pid {parent}, in MPI's messages" if parent else "")
        _say(f"rank {rank} ({pids}) ended the job: its process {death_text(record)}")
        code = record.fields.get(fmt.DIED_STATUS) or code
        failed = {rank: record}
    else:
        _say_grouped({rank: f" failed: {failure_text(record)}" for rank, record in failed.items()})
    _say_grouped(
        {rank: f": {signal_text(record)}" for rank, record in found.signalled.items() if rank not in failed}
    )  # (a failure says where)
    _say_grouped(
        {
            rank: f": {stacks_text(record)}"
            for rank, record in found.stacks.items()
            if rank not in failed and rank not in found.signalled
        }
    )
    if code and not failed and not named:
        unended = [u for u in found.unended if u.rank not in found.signalled and u.rank not in found.stacks]
        _say(
            f"the job exited with code {code}; no rank logged an unhandled exception"
            + ("" if unended or found.signalled else " (killed by a signal or by the launcher?)")
        )
        _say_unended(unended)
    logged = {int(m.group(1)) for p in files if (m := fmt.RANK_FILE_NAME.match(p.name))}
    missing = set(range(ranks)) - logged
    if missing and timeline is None:  # (else the merge said so: "no log read from ranks ...")
        _say(f"{ranks_text(missing)} wrote no log file")
    _say(f"logs: {run_dir}/ ({plural(len(files), 'rank file')})")
    if timeline is not None:
        _say(f"timeline: {timeline}")
    return code or (1 if failed else 0)
