"""`distvlog diff PATH... [--json]`: which rank went wrong, where and when, from the per-rank logs alone.

Reads the `grad_stats` records of guarded backward nodes (level >= 5), DataParallel's records (at
verbosity 1 of module `parallel`: parameter digests per step, per-bucket checksums, norms and wait times)
and E/F records; aligns them across ranks by step and reports errors, the first cause first:
NaN/Inf origins and how they spread; gradient explosions on one rank; ranks whose backward ran other
nodes; where the ranks' sequences of allreduces part (one more or fewer: MPI then pairs the wrong
collectives); allreduces not finished or with results that differ; parameters that part although every
allreduce agreed (silent corruption, other hyperparameters, a skipped broadcast); logs that end early;
failed DataParallel checks and other errors. Where ranks disagree the minority is named; with no majority,
every side. Notes (a local gradient norm far from its peers' or its own history, a straggler) are listed
apart and never change the exit code: local gradients legitimately differ before the allreduce.

`distvlog diff RUN_A RUN_B` (or `diff RUN_A --against RUN_B`) compares two runs of one job instead: where
run B first departs from run A, whether within float rounding, and what that points to (`_departure`).

Exit 0 when no error is found (the report names any check the logs could not support), 1 when one is,
2 on unusable input.
"""

from __future__ import annotations

import argparse
import sys

from ...wording import shown
from ..output import output, write_all
from ..read import resolve_inputs, say_runs_read, warner
from ._against import add_arguments as add_run_against_arguments
from ._against import run_against, runs_of, two_runs
from ._departure import RunsReport, analyse_runs
from ._findings import Finding
from ._gradients import History
from ._logs import WANTED, Loader, Logs, error_text, load
from ._render import as_dict, as_json, as_text, context_text, line
from ._report import Report, analyse
from ._runs_render import as_text as runs_text

__all__ = [
    "WANTED",
    "Finding",
    "History",
    "Loader",
    "Logs",
    "Report",
    "RunsReport",
    "analyse",
    "analyse_runs",
    "as_dict",
    "error_text",
    "load",
    "line",
    "register",
    "run",
    "runs_text",
    "two_runs",
]


def run(args: argparse.Namespace) -> int:
    runs = runs_of(args)
    if runs is not None:
        return run_against(args, *runs)
    say_runs_read("diff", args.paths)
    if args.output in (None, "-"):
        report = analyse(load(args.paths, warner("diff")))
        sys.stdout.write(shown(_text(report, args)))
        return report.exit_code
    with output(args.output, [f.path for f in resolve_inputs(args.paths)]) as fd:  # refused before the reading
        report = analyse(load(args.paths, warner("diff")))
        write_all(fd, _text(report, args).encode())
    return report.exit_code


def _text(report: Report, args: argparse.Namespace) -> str:
    if args.json:
        return as_json(report).decode() + "\n"
    if not args.context:
        return as_text(report)
    from ..merge import context

    return as_text(report) + context_text(context(args.paths, args.context, args.context))


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of lines (0 or more)")
    return int(text)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "diff",
        help="which rank went wrong, where and when: NaN origins, explosions, desync, parameters that part",
        description=__doc__.split("\n\n")[1],
        epilog="exit status: 0 when no error is found, 1 when one is, 2 on unusable input",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="a run directory, a log root (its latest run) or files")
    p.add_argument("--json", action="store_true", help="the report as JSON")
    p.add_argument(
        "--context",
        metavar="N",
        type=_count,
        default=0,
        help="then N lines of the collapsed timeline (merge --collapse) before the first place ranks differ, N from it",
    )
    p.add_argument("-o", "--output", metavar="OUT", help="write the report to OUT (default, or -: standard output)")
    add_run_against_arguments(p)
    p.set_defaults(run=run)
