"""`distvlog report PATH... -o report.html`: one self-contained HTML file to look at a run.

At the top, `diff`'s findings (errors first cause first, then notes); below, plots per rank by step: step
time and allreduce wait (a straggler stands out), loss, the local gradient norm of each allreduce bucket
and of each guarded node's gradients, with the first error's step marked on every plot. Drawn by plotly,
whose JavaScript is inlined: the file opens without a network (`pip install 'distvlog[report]'`).
`report RUN_A RUN_B` (or `--against RUN_B`) draws two runs of one job instead (`_runs`).
"""

from __future__ import annotations

import argparse
import html
import sys

from ...errors import InputError
from ...wording import plural, ranks_text
from ..diff import Report, analyse, line, load, two_runs
from ..output import output, write_all
from ..read import resolve_inputs, say_runs_read, warner
from ._runs import run_against
from ._series import Panel, panels

PALETTE_SIZE = 24  # plotly's Dark24: a colour per rank up to 24 ranks, then they repeat


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="write one self-contained HTML report: diff's findings and plots per rank",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="a run directory, a log root (its latest run) or files")
    p.add_argument("-o", "--output", metavar="OUT", required=True, help="the HTML file to write")
    p.add_argument("--against", metavar="RUN_B", help="two runs on the same plots (also: report RUN_A RUN_B)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise InputError("needs plotly to draw: pip install 'distvlog[report]'") from None
    runs = two_runs(args.paths, args.against)
    if runs is not None:
        return run_against(*runs, args.output, _STYLE)
    say_runs_read("report", args.paths)
    logs = load(args.paths, warner("report"))
    report = analyse(logs)
    drawn = panels(logs, args.paths)
    page = render(report, drawn, " ".join(args.paths))
    with output(args.output, [f.path for f in resolve_inputs(args.paths)]) as fd:
        write_all(fd, page.encode("utf-8"))
    print(
        f"distvlog report: {plural(len(report.errors), 'error')}, {plural(len(report.notes), 'note')}, "
        f"{plural(len(drawn), 'plot')} of {plural(len(report.ranks), 'rank')} to {args.output}",
        file=sys.stderr,
    )
    return 0


def _marks(report: Report) -> list[tuple[int, str]]:
    """(step, label) of the first error, to mark on every plot (the first cause; the rest follow from it)."""
    first = next((f for f in report.errors if f.step is not None), None)
    if first is None:
        return []
    return [(first.step, line(first).split(":")[0])]


def _culprits(report: Report) -> set[int]:
    """The ranks the first error (the first cause) and the notes name: drawn bold."""
    out: set[int] = set()
    for f in [*report.errors[:1], *report.notes]:
        rank = getattr(f, "rank", None)
        out.update([rank] if isinstance(rank, int) else getattr(f, "ranks", []) or [])
    return out


def figure_html(report: Report, drawn: list[Panel]) -> str:
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    if not drawn:
        return "<p>No per-step data to plot.</p>"
    titles = [p.title + (f" ({p.unit})" if p.unit else "") for p in drawn]
    fig = make_subplots(
        rows=len(drawn), cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=0.3 / len(drawn)
    )
    culprits, shown = _culprits(report), set()
    for row, panel in enumerate(drawn, 1):
        for rank, by_step in sorted(panel.series.items()):
            if not by_step:
                continue
            steps = sorted(by_step)
            fig.add_trace(
                go.Scatter(
                    x=steps,
                    y=[by_step[s] for s in steps],
                    mode="lines",
                    name=f"rank {rank}",
                    legendgroup=str(rank),
                    showlegend=rank not in shown,
                    line={"color": qualitative.Dark24[rank % PALETTE_SIZE], "width": 3 if rank in culprits else 1},
                ),
                row,
                1,
            )
            shown.add(rank)
        if panel.log_y:
            fig.update_yaxes(type="log", row=row, col=1)
    for step, label in _marks(report):
        fig.add_vline(
            x=step,
            line_dash="dash",
            line_color="crimson",
            annotation_text=html.escape(label),
            annotation_position="top right",
        )
    fig.update_xaxes(title_text="step", row=len(drawn), col=1)
    fig.update_layout(
        height=260 * len(drawn) + 120,
        margin={"t": 60, "l": 60, "r": 20, "b": 40},
        hovermode="x unified",
        legend={"title": {"text": "ranks (bold: named above)"}},
    )
    return fig.to_html(full_html=False, include_plotlyjs=True, config={"displaylogo": False})


def findings_html(report: Report) -> str:
    def items(findings: list) -> str:
        return "".join(f"<li>{html.escape(line(f))}</li>" for f in findings)

    parts = []
    if report.errors:
        parts.append(
            f"<h2 class='bad'>{plural(len(report.errors), 'error')}, the first cause first</h2>"
            f"<ol class='errors'>{items(report.errors)}</ol>"
        )
    else:
        parts.append("<h2 class='good'>No divergence found</h2>")
    if report.notes:
        parts.append(f"<h2>Notes (unusual, not errors)</h2><ul class='notes'>{items(report.notes)}</ul>")
    if report.not_checked:
        parts.append(
            "<h2>Not checked</h2><ul>"
            + "".join(f"<li>{html.escape(', '.join(c))}: {html.escape(why)}</li>" for c, why in report.not_checked)
            + "</ul>"
        )
    return "\n".join(parts)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.2em; }
.bad { color: #b00020; } .good { color: #1b7a1b; }
li { margin: 0.3em 0; font-family: ui-monospace, monospace; font-size: 0.9em; white-space: pre-wrap; }
.meta { color: #666; }
"""


def render(report: Report, drawn: list[Panel], source: str) -> str:
    counts = ", ".join(f"{n:,} {k}" for k, n in report.counts.items() if n)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>distvlog report: {html.escape(source)}</title>
<style>{_STYLE}</style></head>
<body>
<h1>distvlog report</h1>
<p class="meta">{html.escape(source)}: {html.escape(ranks_text(report.ranks))}; {html.escape(counts)}</p>
<section id="findings">
{findings_html(report)}
</section>
<section id="plots">
{figure_html(report, drawn)}
</section>
</body></html>
"""
