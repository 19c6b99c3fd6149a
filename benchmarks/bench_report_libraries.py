"""Which plotting library `distvlog report` builds on: the same figure (4 panels, 16 ranks x 200 steps
each) as one self-contained HTML file, by each candidate that is installed: file size, and time to open it in
headless Chromium until every plot is drawn (alternating rounds, medians).

    python benchmarks/bench_report_libraries.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "report"))
from browser import browser  # noqa: E402

RANKS, STEPS = 16, 200
PANELS = ("step time (ms)", "allreduce wait (ms)", "loss", "gradient norm")


def data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {panel: rng.lognormal(0, 0.3, (RANKS, STEPS)) for panel in PANELS}


def plotly_html(curves: dict[str, np.ndarray], out: Path) -> str:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=len(PANELS), cols=1, subplot_titles=PANELS)
    for row, values in enumerate(curves.values(), 1):
        for rank, series in enumerate(values):
            fig.add_trace(go.Scatter(y=series, name=f"rank {rank}", legendgroup=str(rank), showlegend=row == 1), row, 1)
    fig.write_html(out, include_plotlyjs=True, full_html=True)
    return "return document.querySelectorAll('.js-plotly-plot .scatterlayer .trace').length"


def bokeh_html(curves: dict[str, np.ndarray], out: Path) -> str:
    from bokeh.embed import file_html
    from bokeh.layouts import column
    from bokeh.plotting import figure
    from bokeh.resources import INLINE

    figures = []
    for panel, values in curves.items():
        f = figure(title=panel, width=1000, height=250)
        for rank, series in enumerate(values):
            f.line(np.arange(STEPS), series, legend_label=f"rank {rank}")
        figures.append(f)
    out.write_text(file_html(column(*figures), INLINE, "report"))
    return "return window.Bokeh && Bokeh.documents.length && Bokeh.documents[0].is_idle"


CANDIDATES = {"plotly": plotly_html, "bokeh": bokeh_html}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    curves = data()
    with tempfile.TemporaryDirectory() as tmp:
        pages = {}
        for name, make in CANDIDATES.items():
            if importlib.util.find_spec(name) is None:
                print(f"{name}: not installed, skipped")
                continue
            out = Path(tmp) / f"{name}.html"
            started = time.perf_counter()
            drawn = make(curves, out)
            pages[name] = (out, drawn, time.perf_counter() - started)
        times: dict[str, list[float]] = {name: [] for name in pages}
        with browser() as b:
            for _ in range(args.rounds):
                for name, (out, drawn, _) in pages.items():
                    b.open(Path(tmp) / "blank.html") if (Path(tmp) / "blank.html").exists() else None
                    started = time.perf_counter()
                    b.open(out)
                    assert b.wait_for(drawn), f"{name}: plots not drawn"
                    times[name].append(time.perf_counter() - started)
            errors = b.console()
        for name, (out, _, build_s) in pages.items():
            print(
                f"{name}: {out.stat().st_size / 1e6:.2f} MB, written in {build_s:.2f} s, opened and drawn in "
                f"{statistics.median(times[name]) * 1e3:.0f} ms (median of {args.rounds})"
            )
        print(f"console entries: {len(errors)}")


if __name__ == "__main__":
    main()
