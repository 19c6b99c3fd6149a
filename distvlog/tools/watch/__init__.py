"""`distvlog watch [PATH] [--json] [--stop-on-error] [--hang-after S]`: diff's verdicts while the job runs.

Follows a running job's rank files (PATH: its run directory, a log root's latest run; default the latest run
under the log root) and prints each verdict as soon as the records prove it, with diff's words, culprits and
first-cause-first order: a step's records are judged once every rank has gone past it, so what watch says
live is what `diff` says afterwards. When no rank makes progress for a while (--hang-after S; by default 10
median steps, at least 5 s) it asks every rank for its stacks and says which ranks wait in which allreduce
and where the others are instead (a hang: an error), or that every rank runs Python (a pause: a note). When
the job has ended, the run is read as `diff` reads it and what was not said yet is said, notes too.
--stop-on-error ends the job after the first error: the verdict goes into every rank's file, then SIGTERM
goes to the ranks on this host (`distvlog launch --watch`: through the launcher).

Exit 0 when no error was found, 1 when one was, 2 on unusable input (as `diff`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..stacks import add_run_argument, resolve

# `distvlog launch` adds the watch's options to its own: the checks are imported only when a watch runs.
__all__ = ["VERDICT", "Hang", "Watch", "add_arguments", "register", "run", "watch"]


def __getattr__(name: str) -> Any:
    """`Hang`, `Watch` and `VERDICT` from their modules, imported on first use (PEP 562)."""
    if name in ("Hang", "Watch", "VERDICT"):
        from . import _hang, _live, _stop

        return {"Hang": _hang.Hang, "Watch": _live.Watch, "VERDICT": _stop.VERDICT}[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _printer(as_json: bool) -> Callable[[Any, bool, bool], None]:
    from ...format import dumps
    from ...wording import shown
    from ..diff import as_dict, line
    from ._hang import Hang, text

    def emit(finding: Any, error: bool, live: bool) -> None:
        if as_json:
            out = dumps({**as_dict(finding), "error": error, "live": live}).decode()
        elif isinstance(finding, Hang):
            out = text(finding)
        else:
            out = ("" if error else "note: ") + line(finding)
        sys.stdout.write(shown(out) + "\n")
        sys.stdout.flush()

    return emit


def _say(text_: str) -> None:
    print(f"distvlog watch: {text_}", file=sys.stderr, flush=True)


def watch(
    run_dir: Path,
    *,
    as_json: bool = False,
    stop_on_error: bool = False,
    hang_after: float | None = None,
    launcher_stop: Callable[[], None] | None = None,
    job_ended: Callable[[], bool] | None = None,
) -> int:
    """Watch the job writing into `run_dir` until it has ended (`job_ended()`: the launcher's word): 0, or 1
    when an error was found."""
    from ._live import Watch

    _say(f"watching {run_dir}")
    live = Watch(
        run_dir,
        _printer(as_json),
        hang_after=hang_after,
        stop_on_error=stop_on_error,
        launcher_stop=launcher_stop,
        job_ended=job_ended,
        say=_say,
    )
    code = live.run()
    _say(f"{live.follow.reason}; {live.errors} error{'s' if live.errors != 1 else ''} found")
    return code


def run(args: argparse.Namespace) -> int:
    try:
        return watch(
            resolve(args.path), as_json=args.json, stop_on_error=args.stop_on_error, hang_after=args.hang_after
        )
    except KeyboardInterrupt:
        _say("interrupted")
        return 130


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive number of seconds")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--stop-on-error and --hang-after (shared with `distvlog launch --watch`)."""
    parser.add_argument(
        "--stop-on-error", action="store_true", help="stop the job after the first error verdict (a hang included)"
    )
    parser.add_argument(
        "--hang-after",
        type=_positive_seconds,
        metavar="S",
        help="ask for the ranks' stacks once no rank made progress for S seconds (default: 10 median steps, >= 5)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "watch",
        help="diff's verdicts while the job runs; hangs explained with every rank's stacks",
        description=__doc__.split("\n\n")[1],
    )
    add_run_argument(p)
    p.add_argument("--json", action="store_true", help="one JSON object per verdict")
    add_arguments(p)
    p.set_defaults(run=run)
