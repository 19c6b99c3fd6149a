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
import math
import sys
from dataclasses import dataclass
from typing import Any

from ...errors import InputError
from ...wording import plural, ranks_text
from ..diff import Report, analyse, line, load, two_runs
from ..output import output, write_all
from ..read import resolve_inputs, say_runs_read, warner
from ._runs import run_against
from ._series import Panel, culprit_first, panels
from ._timeline import table_html

PALETTE_SIZE = 24  # plotly's Dark24: a colour per rank up to 24 ranks, then they repeat
PLOT_PX = 260  # each plot's height
GAP_PX = 90  # between plots: room for each one's step axis and the next one's title


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
    drawn = culprit_first(panels(logs, args.paths), report, logs)
    page = render(report, drawn, " ".join(args.paths), table_html(args.paths))
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
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    if not drawn:
        return "<p>No per-step data to plot.</p>"
    titles = [p.title + (f" ({p.unit})" if p.unit else "") for p in drawn]
    height = PLOT_PX * len(drawn) + 120
    fig = make_subplots(
        rows=len(drawn), cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=GAP_PX / height
    )
    culprits, shown = _culprits(report), set()
    for row, panel in enumerate(drawn, 1):
        scale = _Scale.of(panel)
        for rank, by_step in sorted(panel.series.items()):
            if not by_step:
                continue
            steps = sorted(by_step)
            trace = _RankTrace(rank, qualitative.Dark24[rank % PALETTE_SIZE])
            fig.add_trace(
                trace(
                    steps,
                    [scale.drawn(by_step[s]) for s in steps],
                    mode="lines",
                    showlegend=rank not in shown,
                    line={"color": trace.colour, "width": 3 if rank in culprits else 1},
                ),
                row,
                1,
            )
            special = [s for s in steps if scale.is_special(by_step[s])]
            if special:  # NaN, Inf (and 0 on a log axis) as markers on a band of their own: never a gap
                symbols = [_symbol(by_step[s]) for s in special]
                fig.add_trace(
                    trace(
                        special,
                        [scale.band(by_step[s]) for s in special],
                        mode="markers",
                        showlegend=False,
                        hovertext=[_value_text(by_step[s]) for s in special],
                        marker={"color": trace.colour, "size": 9, "symbol": symbols},
                    ),
                    row,
                    1,
                )
            shown.add(rank)
        scale.axes(fig, row, panel)
    for step, label in _marks(report):
        fig.add_vline(
            x=step,
            line_dash="dash",
            line_color="crimson",
            annotation_text=html.escape(label),
            annotation_position="top right",
        )
    fig.update_xaxes(title_text="step", title_standoff=4, showticklabels=True)  # each plot its own step axis
    fig.update_layout(
        height=height,
        margin={"t": 60, "l": 60, "r": 20, "b": 40},
        hovermode="x unified",
        legend={"title": {"text": "ranks (bold: named above)"}},
    )
    return fig.to_html(full_html=False, include_plotlyjs=True, config={"displaylogo": False})


@dataclass
class _RankTrace:
    """A rank's traces: its name, legend group and colour."""

    rank: int
    colour: str

    def __call__(self, x: list[int], y: list, **style: Any) -> Any:
        import plotly.graph_objects as go

        return go.Scatter(x=x, y=y, name=f"rank {self.rank}", legendgroup=str(self.rank), **style)


def _value_text(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Inf" if value > 0 else "-Inf") if math.isinf(value) else f"{value:g}"


def _symbol(value: float) -> str:
    return "x" if math.isnan(value) else "triangle-up" if math.isinf(value) else "circle-open"


@dataclass
class _Scale:
    """A panel's y axis: log where its finite values are all positive or zero and some positive, else linear;
    where it draws the values a line cannot (NaN, Inf; 0 on a log axis): a band above the finite values
    (NaN/Inf) and one below them (0), each drawn where the panel has such values."""

    log: bool
    high: float  # where NaN and Inf are drawn
    low: float  # where 0 is drawn on a log axis
    bands: list[tuple[float, str]]

    @classmethod
    def of(cls, panel: Panel) -> _Scale:
        values = [v for series in panel.series.values() for v in series.values()]
        finite = [v for v in values if math.isfinite(v)]
        positive = [v for v in finite if v > 0]
        if panel.log_y and positive and min(finite) >= 0:
            log, high, low = True, max(positive) * 10, min(positive) / 10
        else:
            top, bottom = max(finite, default=0.0), min(finite, default=0.0)
            log, high, low = False, top + max(top - bottom, abs(top), 1.0) * 0.2, 0.0
        bands = [(high, "NaN/Inf")] if len(finite) < len(values) else []
        bands += [(low, "0")] if log and len(positive) < len(finite) else []
        return cls(log, high, low, bands)

    def is_special(self, value: float) -> bool:
        return not math.isfinite(value) or (self.log and value <= 0)

    def drawn(self, value: float) -> float | None:
        return None if self.is_special(value) else value

    def band(self, value: float) -> float:
        return self.high if not math.isfinite(value) else self.low

    def axes(self, fig: Any, row: int, panel: Panel) -> None:
        """The axis type, and each band as a dotted line across the panel's steps, labelled at its end (a
        trace, not a shape: plotly sizes a log axis for shapes as if their place were a value)."""
        import plotly.graph_objects as go

        if self.log:
            fig.update_yaxes(type="log", row=row, col=1)
        steps = [step for series in panel.series.values() for step in series]
        for y, label in self.bands:
            fig.add_trace(
                go.Scatter(
                    x=[min(steps), max(steps)],
                    y=[y, y],
                    mode="lines+text",
                    text=["", label],
                    textposition="top left",
                    textfont={"size": 10, "color": "#666"},
                    line={"dash": "dot", "color": "#999", "width": 1},
                    hoverinfo="skip",
                    showlegend=False,
                ),
                row,
                1,
            )


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
.timeline { border-collapse: collapse; font-family: ui-monospace, monospace; font-size: 0.8em; }
.timeline td, .timeline th { text-align: left; padding: 1px 8px; vertical-align: top; }
.timeline .apart { background: #fde8ec; }
"""


def render(report: Report, drawn: list[Panel], source: str, timeline: str = "") -> str:
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
<section id="timeline">
{timeline}
</section>
<section id="plots">
{figure_html(report, drawn)}
</section>
</body></html>
"""
