"""What `distvlog launch` says after the job: which rank failed and why (from the F record each rank's
crash hook wrote, traceback included), the merged timeline, and where the files are."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .._errors import InputError
from ..logger._lifecycle import BLOCKED_IN_C
from ..tools._notes import plural
from ..tools.reader import Record, open_sources, read_records
from .comm import ranks_text


def _say(text: str) -> None:
    print(f"distvlog launch: {text}", file=sys.stderr, flush=True)


def stop_records(run_dir: Path) -> tuple[dict[int, Record], dict[int, Record]]:
    """Per rank, its first F record (why it failed) and its first record of where a signal found its main
    thread blocked in C (where it hung)."""
    fatal: dict[int, Record] = {}
    blocked: dict[int, Record] = {}
    for record in read_records(open_sources([str(run_dir)]), severities="WF"):
        if record.severity == "F":
            fatal.setdefault(record.rank, record)
        elif BLOCKED_IN_C in record.event.partition("\n")[0]:
            blocked.setdefault(record.rank, record)
    return fatal, blocked


def failure_text(record: Record) -> str:
    """`ValueError: boom (train.py:88)`: the last line of the traceback and where it was raised."""
    lines = [line.strip() for line in record.event.splitlines() if line.strip()]
    return f"{lines[-1] if lines else record.event} ({record.file}:{record.line})"


def _merge(run_dir: Path) -> Path | None:
    """`distvlog merge RUN_DIR -o RUN_DIR/timeline.log`, through the CLI (its one-line summary included)."""
    from ..cli import main

    target = run_dir / "timeline.log"
    return target if main(["merge", str(run_dir), "-o", str(target)]) == 0 else None


def after_run(run_dir: Path, ranks: int, code: int) -> int:
    """Report on a finished job; the exit code is the job's (1 if it exited 0 but a rank logged F)."""
    files = sorted(run_dir.glob("rank-*")) if run_dir.is_dir() else []
    if not files:  # a script that never logs is not a failure: the job's own exit code stands
        _say(f"no rank wrote a log file under {run_dir}: nothing to merge"
             + (f" (the job exited with code {code})" if code else ""))
        return code
    try:
        failed, blocked = stop_records(run_dir)
        timeline = _merge(run_dir)
    except InputError as exc:
        _say(f"cannot read the run's logs: {exc}")
        return code or 1
    by_reason: dict[str, list[int]] = {}
    for rank, record in sorted(failed.items()):
        by_reason.setdefault(failure_text(record), []).append(rank)
    for reason, ranks_failed in by_reason.items():
        _say(f"{ranks_text(ranks_failed)} failed: {reason}")
    by_place: dict[str, list[int]] = {}
    for rank, record in sorted(blocked.items()):
        if rank in failed:  # (its failure says where)
            continue
        by_place.setdefault(f"{record.event.split()[0]} found its main thread blocked in C at {record.file}:"
                            f"{record.line}", []).append(rank)
    for place, ranks_blocked in by_place.items():
        _say(f"{ranks_text(ranks_blocked)}: {place}")
    if code and not failed:
        _say(f"the job exited with code {code}; no rank logged an unhandled exception "
             "(killed by a signal or by the launcher?)")
    logged = {int(m.group(1)) for p in files if (m := re.match(r"rank-(\d+)\.", p.name))}
    missing = set(range(ranks)) - logged
    if missing and timeline is None:  # (else the merge said so: "no log read from ranks ...")
        _say(f"{ranks_text(missing)} wrote no log file")
    _say(f"logs: {run_dir}/ ({plural(len(files), 'rank file')})")
    if timeline is not None:
        _say(f"timeline: {timeline}")
    return code or (1 if failed else 0)
