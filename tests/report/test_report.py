"""`distvlog report` on a real run with a planted NaN, opened in a real headless Chromium: it renders, the
findings come first, every plot is drawn, nothing is fetched from a network, the console has no error."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "distributed"))
from browser import available, browser  # noqa: E402
from launch_testkit import launch_train  # noqa: E402

from distvlog.cli import main  # noqa: E402

needs_plotly = pytest.mark.skipif(
    importlib.util.find_spec("plotly") is None, reason="plotly is not installed (pip install -e '.[report]')"
)
needs_browser = pytest.mark.skipif(available() is not None, reason=str(available()))
# what plotly draws: a trace per rank per plot
DRAWN = "return document.querySelectorAll('#plots .js-plotly-plot .scatterlayer .trace').length"
# the markers a rank's traces draw in the first plot: [step, hover text, inside the plot's area]
FIRST_PLOTS_MARKERS = """
const gd = document.querySelector('#plots .js-plotly-plot');
const area = gd.querySelector('.draglayer .xy .nsewdrag').getBoundingClientRect();
const inside = r => r.width > 0 && r.left >= area.left && r.right <= area.right && r.top >= area.top
    && r.bottom <= area.bottom;
return [...gd.querySelectorAll('.cartesianlayer .subplot.xy .scatterlayer .trace')]
  .filter(g => g.__data__[0].trace.name === arguments[0])
  .flatMap(g => [...g.querySelectorAll('path.point')].map(p => {
      const trace = g.__data__[0].trace;
      return [p.__data__.x, (trace.hovertext || [])[p.__data__.i] ?? null, inside(p.getBoundingClientRect())];
  }));
"""
STEP_AXES = (
    "return [...document.querySelectorAll('#plots .infolayer text')]"
    ".filter(t => /^x\\d*title$/.test(t.getAttribute('class')) && t.textContent === 'step').length"
)


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory) -> Path:
    """A 4-rank run of train.py with a NaN made on rank 2 at step 6."""
    return launch_train(
        tmp_path_factory.mktemp("report"),
        4,
        "--data",
        "synthetic",
        "--steps",
        "12",
        "--inject-nan-rank",
        "2",
        "--inject-nan-step",
        "6",
    )


@needs_plotly
@needs_browser
def test_the_report_renders_with_findings_first_and_every_plot_drawn(nan_run, tmp_path, capsys):
    """The page shows diff's first finding at the top, then the plots of the node it names, whose NaN (a
    norm a line or a log axis cannot draw) is a marker inside its plot at that step; every plot has a line
    per rank, a step axis of its own and the NaN's step marked; it fetches nothing and logs no console
    error or warning."""
    out = tmp_path / "report.html"
    assert main(["report", str(nan_run), "-o", str(out)]) == 0
    summary = capsys.readouterr().err
    plots = int(re.search(r"(\d+) plots of 4 ranks", summary).group(1))
    with browser() as b:
        b.open(out)
        assert b.wait_for(f"{DRAWN[: -len('.length')]}.length >= {plots * 4} && true") is True
        drawn = b.run(DRAWN)
        first = b.run("return document.querySelector('#findings ol.errors li').textContent")
        order = b.run("return [...document.querySelectorAll('section')].map(s => s.id)")
        # plotly draws subplot titles and the mark as annotations
        texts = b.run("return [...document.querySelectorAll('#plots .annotation-text')].map(t => t.textContent)")
        culprits_markers = b.run(FIRST_PLOTS_MARKERS, "rank 2")
        step_axes = b.run(STEP_AXES)
        fetched = b.run("return performance.getEntriesByType('resource').map(e => e.name)")
        console = [e for e in b.console() if e["level"] in ("SEVERE", "WARNING")]
    assert drawn >= plots * 4  # a line per rank in every plot (the NaN makes gaps, not missing lines)
    assert first.startswith("NaN/Inf origin: rank 2 step 6 pow"), first
    assert order == ["findings", "timeline", "plots"]
    assert texts[:2] == ["gradient norm, powGradNode grad_x", "gradient norm, powGradNode grad_out"], texts
    assert texts[2:5] == ["step time (ms)", "allreduce wait (ms)", "loss"], texts
    assert [6, "NaN", True] in culprits_markers, culprits_markers
    assert step_axes == plots, step_axes
    assert texts.count("NaN/Inf origin") == plots and len(texts) == 2 * plots, texts  # marked on every plot
    assert fetched == [] and console == [], (fetched, console)


@needs_plotly
def test_the_report_is_one_file_that_needs_no_network(nan_run, tmp_path):
    """The HTML holds plotly's JavaScript itself: no script or stylesheet is loaded from elsewhere."""
    out = tmp_path / "report.html"
    assert main(["report", str(nan_run), "-o", str(out)]) == 0
    page = out.read_text()
    assert re.search(r"<script[^>]*\bsrc=", page) is None and re.search(r"<link[^>]*\bhref=", page) is None
    assert "plotly.js v" in page


def test_without_plotly_the_report_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    """Without plotly (a None entry in sys.modules is how Python says a module cannot be imported): one line
    naming the extra to install, exit 2."""
    monkeypatch.setitem(sys.modules, "plotly", None)
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 2
    assert capsys.readouterr().err.strip() == (
        "distvlog report: error: needs plotly to draw: pip install 'distvlog[report]'"
    )
