"""`distvlog report RUN_A RUN_B -o report.html`: two runs of one job on the same plots, the departure marked.

At the top, `diff RUN_A RUN_B`'s verdict; below, per step, each run's mean over its ranks of the step time,
the loss and the local gradient norm of each bucket and guarded node: the curves lie on each other until
the departure (a dashed line), then part as far as its consequences go.
"""

from __future__ import annotations

import html
import sys
from collections.abc import Callable

from ...wording import plural
from ..diff import Logs, RunsReport, analyse_runs, load, runs_text
from ..output import output, write_all
from ..read import resolve_inputs, say_runs_read, warner
from ._series import Series, bucket_norms, node_norms, step_times

RUN_COLOURS = {"A": "#1f77b4", "B": "#d62728"}


def _mean(series: Series) -> dict[int, float]:
    """step -> the mean over the ranks that have the step."""
    by_step: dict[int, list[float]] = {}
    for per_step in series.values():
        for step, value in per_step.items():
            by_step.setdefault(step, []).append(value)
    return {step: sum(values) / len(values) for step, values in sorted(by_step.items())}


def _losses(logs: Logs) -> Series:
    return {rank: mine.losses for rank, mine in logs.ranks.items()}


def apart(report: RunsReport) -> dict[str, dict[int, float]]:
    """Run B's largest relative difference from run A per step (of a loss or a gradient norm): a departure
    within rounding, invisible on the curves, shows here."""
    largest: dict[int, float] = {}
    for d in report.comparison.differences:
        if d.relative:
            largest[d.step] = max(largest.get(d.step, 0.0), d.relative)
    return {"B": dict(sorted(largest.items()))} if largest else {}


def curves(logs_a: Logs, logs_b: Logs) -> list[tuple[str, bool, dict[str, dict[int, float]]]]:
    """(title, log scale, run -> step -> mean over its ranks) for each quantity either run has."""
    wanted: list[tuple[str, bool, Callable[[Logs], dict[str, Series]]]] = [
        ("step time (ms)", False, lambda logs: {"": step_times(logs)}),
        ("loss", False, lambda logs: {"": _losses(logs)}),
        ("local gradient norm, bucket", True, lambda logs: {str(k): v for k, v in bucket_norms(logs).items()}),
        ("gradient norm,", True, node_norms),
    ]
    out = []
    for title, log_y, extract in wanted:
        a, b = extract(logs_a), extract(logs_b)
        for name in sorted(set(a) | set(b)):
            runs = {run: _mean(per[name]) for run, per in (("A", a), ("B", b)) if name in per}
            if any(runs.values()):
                out.append((f"{title} {name}".strip(), log_y, runs))
    return out


def figure_html(drawn: list[tuple[str, bool, dict[str, dict[int, float]]]], departure: int | None) -> str:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not drawn:
        return "<p>No per-step data to plot.</p>"
    fig = make_subplots(
        rows=len(drawn),
        cols=1,
        shared_xaxes=True,
        subplot_titles=[t for t, _, _ in drawn],
        vertical_spacing=0.3 / len(drawn),
    )
    for row, (_, log_y, runs) in enumerate(drawn, 1):
        for run, by_step in runs.items():
            fig.add_trace(
                go.Scatter(
                    x=list(by_step),
                    y=list(by_step.values()),
                    mode="lines+markers",
                    name=f"run {run}",
                    legendgroup=run,
                    showlegend=row == 1,
                    line={"color": RUN_COLOURS[run], "width": 2, "dash": "solid" if run == "A" else "dot"},
                ),
                row,
                1,
            )
        if log_y:
            fig.update_yaxes(type="log", row=row, col=1)
    if departure is not None:
        fig.add_vline(
            x=departure, line_dash="dash", line_color="crimson", annotation_text=f"B departs at step {departure}"
        )
    fig.update_xaxes(title_text="step", row=len(drawn), col=1)
    fig.update_layout(height=240 * len(drawn) + 120, margin={"t": 60, "l": 60, "r": 20, "b": 40}, hovermode="x unified")
    return fig.to_html(full_html=False, include_plotlyjs=True, config={"displaylogo": False})


def render(report: RunsReport, drawn: list, style: str) -> str:
    title = f"{report.run_a} against {report.run_b}"
    verdict = {"identical": "good", "rounding": "", "departs": "bad"}[report.verdict]
    text = runs_text(report).splitlines()
    items = "".join(f"<li>{html.escape(line.strip())}</li>" for line in text[2:])
    step = None if report.departure is None else report.departure.step
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>distvlog report: {html.escape(title)}</title>
<style>{style}</style></head>
<body>
<h1>distvlog report: run against run</h1>
<p class="meta">{html.escape(text[0])}</p>
<section id="verdict">
<h2 class="{verdict}">{html.escape(text[1])}</h2>
<ul>{items}</ul>
</section>
<section id="plots">
{figure_html(drawn, step)}
</section>
</body></html>
"""


def run_against(run_a: str, run_b: str, out: str, style: str) -> int:
    """Write the two-run report to `out`; what it holds is said in one line on stderr."""
    say_runs_read("report", [run_a, run_b])
    warn = warner("report")
    logs_a, logs_b = load([run_a], warn, losses=True), load([run_b], warn, losses=True)
    report = analyse_runs(run_a, logs_a, run_b, logs_b)
    drawn = curves(logs_a, logs_b)
    if differences := apart(report):
        drawn.insert(0, ("largest relative difference of run B from run A", True, differences))
    with output(out, [f.path for f in resolve_inputs([run_a, run_b])]) as fd:
        write_all(fd, render(report, drawn, style).encode("utf-8"))
    said = "bitwise identical" if report.departure is None else f"run B departs at step {report.departure.step}"
    print(f"distvlog report: {said}, {plural(len(drawn), 'plot')} of both runs to {out}", file=sys.stderr)
    return 0
