"""`distvlog launch` of more ranks than cores: 32 ranks of the example on a 2-core machine."""

from __future__ import annotations

import pytest
from launch_testkit import TRAIN, run_dir_of

from distvlog.cli import main

pytestmark = pytest.mark.timeout(300)


def test_thirty_two_ranks_run_merge_and_diff_clean(run_cli, capsys):
    """32 oversubscribed ranks train 3 steps: every rank logs, the timeline holds all 32, `diff` finds no
    divergence."""
    proc = run_cli("launch", "-n", "32", TRAIN, "--steps", "3")
    assert proc.returncode == 0, proc.stderr
    assert "parameters bit-identical on all 32 ranks" in proc.stdout
    run_dir = run_dir_of(proc)
    assert sorted(p.name for p in run_dir.glob("rank-*")) == sorted(f"rank-{r}.log" for r in range(32))
    timeline = (run_dir / "timeline.log").read_text()
    assert all(f"] [rank {r}] allreduce end v=1 step=2 bucket=0" in timeline for r in range(32))
    capsys.readouterr()
    assert main(["diff", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("32 ranks, 3 steps:") and "no divergence found" in out
