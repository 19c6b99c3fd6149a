"""`distvlog diff RUN_A RUN_B` (two run directories or log roots) or `diff RUN_A --against RUN_B`: where a
second run of the same job departs from the first. Same output options, exit codes and bad-input
behaviour as the one-run diff: 0 when bitwise identical (or, without --bitwise, within rounding), 1 when
run B departs, 2 on unusable input."""

from __future__ import annotations

import argparse
import math
import os
import sys

from ...errors import InputError
from ...wording import shown
from ..output import output, write_all
from ..read import resolve_inputs, say_runs_read, warner
from ._departure import DEFAULT_RTOL, RunsReport, analyse_runs
from ._logs import load
from ._runs_render import as_json, as_text


def add_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("run against run", "two run directories (or log roots), or one and --against")
    group.add_argument("--against", metavar="RUN_B", help="compare the run PATH names with this one")
    group.add_argument(
        "--rtol",
        type=float,
        metavar="R",
        help=f"relative difference still within float rounding (default {DEFAULT_RTOL:g})",
    )
    group.add_argument("--bitwise", action="store_true", help="a departure within rounding is an error too (exit 1)")


def _run_directories(path: str) -> frozenset:
    """The directories the rank files a PATH stands for are in: which run it is."""
    return frozenset(f.path.parent.resolve() for f in resolve_inputs([path]))


def two_runs(paths: list[str], against: str | None) -> tuple[str, str] | None:
    """(RUN_A, RUN_B) when PATHs name two runs (two directories of different runs, or one and --against);
    None when they name one."""
    if against is not None:
        if len(paths) != 1:
            raise InputError(f"--against {against}: give one run to compare it with, not {len(paths)} paths")
        return paths[0], against
    if (
        len(paths) == 2
        and all(os.path.isdir(p) for p in paths)
        and _run_directories(paths[0]) != _run_directories(paths[1])
    ):
        return paths[0], paths[1]
    return None


def runs_of(args: argparse.Namespace) -> tuple[str, str] | None:
    """`two_runs` of diff's arguments; the options that only mean something for two runs refused without them."""
    runs = two_runs(args.paths, args.against)
    if runs is None and (args.rtol is not None or args.bitwise):
        raise InputError("--rtol and --bitwise compare two runs: diff RUN_A RUN_B, or diff RUN_A --against RUN_B")
    return runs


def run_against(args: argparse.Namespace, run_a: str, run_b: str) -> int:
    rtol = DEFAULT_RTOL if args.rtol is None else args.rtol
    if not (math.isfinite(rtol) and rtol >= 0):
        raise InputError(f"--rtol {args.rtol}: must be a finite number, at least 0")
    say_runs_read("diff", [run_a, run_b])
    warn = warner("diff")

    def judged() -> RunsReport:
        logs_a, logs_b = load([run_a], warn, losses=True), load([run_b], warn, losses=True)
        return analyse_runs(run_a, logs_a, run_b, logs_b, rtol, args.bitwise)

    if args.output in (None, "-"):
        report = judged()
        sys.stdout.write(shown(_text(report, args.json)))
        return report.exit_code
    with output(args.output, [f.path for f in resolve_inputs([run_a, run_b])]) as fd:  # refused before the reading
        report = judged()
        write_all(fd, _text(report, args.json).encode())
    return report.exit_code


def _text(report: RunsReport, as_json_: bool) -> str:
    return as_json(report).decode() + "\n" if as_json_ else as_text(report)
