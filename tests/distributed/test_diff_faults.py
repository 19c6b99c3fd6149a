"""Every fault class `launch/train.py` can plant, on real multi-rank runs: `distvlog diff` names the rank,
the step and the node or parameter (and the forward line where there is one), the first cause first, and
exits 1; a straggler is a note (exit 0)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distvlog.cli import main
from distvlog.errors import InputError
from distvlog.logger import content_size
from distvlog.tools import diff as diff_tool

REPO = Path(__file__).resolve().parents[2]
TRAIN = str(REPO / "launch" / "train.py")
SOURCE = Path(TRAIN).read_text().splitlines()
HANG_GUARD_S = 120  # a job that should hang is stopped once its logs show it; this only bounds a broken test
QUIET_POLLS = 4  # polls 0.5 s apart in which no rank wrote: every rank has reached the hang


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(SOURCE, 1) if text in line)


def run_dir_of(stderr: str) -> str:
    return re.search(r"distvlog launch: logs: (\S+)/ \(", stderr).group(1)


def planted(run_cli, n: int, *args: str, steps: int = 6, fmt: str = "glog") -> str:
    """The run directory of train.py on n ranks with a fault planted."""
    proc = run_cli(
        "launch", "-n", str(n), TRAIN, "--data", "synthetic", "--steps", str(steps), *args, env={"DISTVLOG_FORMAT": fmt}
    )
    return run_dir_of(proc.stderr)


def diff(capsys, run_dir: str) -> tuple[int, str, dict]:
    code = main(["diff", run_dir])
    out = capsys.readouterr().out
    assert main(["diff", "--json", run_dir]) == code
    return code, out, json.loads(capsys.readouterr().out)


def first_error(report: dict) -> dict:
    return report["errors"][0]


def test_nan_origin_on_the_rank_node_and_line_that_made_it(run_cli, capsys):
    """A NaN made in rank 2's backward at step 3: its origin (node, forward line), then how it reached the
    other ranks through the allreduce."""
    code, out, report = diff(capsys, planted(run_cli, 4, "--inject-nan-rank", "2", "--inject-nan-step", "3"))
    assert code == 1
    poison = line_of("** 0.5")
    assert re.match(
        rf"NaN/Inf origin: rank 2 step 3 pow\d+GradNode grad_x \(forward at train.py:{poison}\)", out.splitlines()[1]
    ), out
    assert "  then NaN/Inf on ranks 0,1,3 from step 4: arrived through the allreduce of step 3 from rank 2" in out
    assert (first_error(report)["rank"], first_error(report)["step"]) == (2, 3)


def test_a_gradient_explosion_on_one_rank(run_cli, capsys):
    """Rank 1's gradient multiplied by 1e6 at step 4: an explosion naming it, the step and where it shows."""
    code, out, report = diff(capsys, planted(run_cli, 4, "--inject-explode-rank", "1", "--inject-explode-step", "4"))
    assert code == 1
    assert re.match(
        r"gradient explosion: rank 1 step 4 .*GradNode grad_\w+ \(forward at train.py:\d+\), bucket \d ",
        out.splitlines()[1],
    ), out
    error = first_error(report)
    assert (error["kind"], error["rank"], error["step"]) == ("explosion", 1, 4) and error["norm"] > 1e3 * error["peers"]


@pytest.mark.parametrize("fmt", ["glog", "jsonl"])
def test_a_bit_flip_after_the_update_names_the_parameter(run_cli, capsys, fmt):
    """One bit of one parameter flips on rank 3 after step 2's update: the parameters part at step 3, that
    parameter alone, although every allreduce agreed (the job's own final check fails too, later); in
    both file formats."""
    run_dir = planted(run_cli, 4, "--inject-bitflip-rank", "3", "--inject-bitflip-step", "2", fmt=fmt)
    code, out, report = diff(capsys, run_dir)
    assert code == 1
    error = first_error(report)
    assert (error["kind"], error["ranks"], error["others"], error["step"], error["params"], error["pattern"]) == (
        "parameters_part",
        [3],
        [0, 1, 2],
        3,
        ["linear_1.w_0"],
        "some",
    ), out
    assert error["reduced_agree"] is True
    assert "although the allreduces of step 2 gave every rank the same gradients: rank 3 changed" in out


def test_a_scaled_bucket_after_the_allreduce_names_the_bucket(run_cli, capsys):
    """Rank 0 doubles bucket 0's averaged gradients at step 1: exactly that bucket's parameters part."""
    code, out, report = diff(capsys, planted(run_cli, 4, "--inject-scale-rank", "0", "--inject-scale-step", "1"))
    assert code == 1
    error = first_error(report)
    assert (error["ranks"], error["step"], error["pattern"]) == ([0], 2, "bucket 0"), out
    assert "exactly bucket 0's parameters: its averaged gradients were changed after the allreduce" in out


@pytest.mark.parametrize("fault", ["lr", "weight-decay"])
def test_other_hyperparameters_part_the_parameters_from_the_first_update(run_cli, capsys, fault):
    """A rank with another learning rate or weight decay: the parameters part at step 1, that rank named."""
    code, out, report = diff(capsys, planted(run_cli, 4, f"--inject-{fault}-rank", "2"))
    assert code == 1
    error = first_error(report)
    assert (error["kind"], error["ranks"], error["step"]) == ("parameters_part", [2], 1), out
    assert "from the first update on: another learning rate, weight decay or optimizer" in out


def test_a_skipped_broadcast_parts_the_parameters_at_step_0(run_cli, capsys):
    """A rank that kept its own initial parameters: they differ at step 0, before any update."""
    code, out, report = diff(capsys, planted(run_cli, 4, "--inject-no-broadcast-rank", "1"))
    assert code == 1
    assert (first_error(report)["ranks"], first_error(report)["step"]) == ([1], 0), out
    assert "before any update — a skipped initial broadcast" in out


def test_another_backward_graph_is_a_desync_naming_the_node(run_cli, capsys):
    """Rank 3's guarded layer runs tanh instead of relu at step 2: desync at that step and node."""
    code, out, report = diff(capsys, planted(run_cli, 4, "--inject-graph-rank", "3", "--inject-graph-step", "2"))
    assert code == 1
    assert re.match(
        r"desync: rank 3 step 2 node #0: ran tanh\d+GradNode where ranks 0-2 ran relu\d+GradNode", out.splitlines()[1]
    ), out


def test_two_ranks_that_part_are_both_named(run_cli, capsys):
    """With two ranks, a bit flip on one: no majority, both named, and the report says why."""
    code, out, report = diff(capsys, planted(run_cli, 2, "--inject-bitflip-rank", "1", "--inject-bitflip-step", "1"))
    assert code == 1
    error = first_error(report)
    assert (error["ranks"], error["no_majority"], error["step"]) == ([0, 1], True, 2), out
    assert out.splitlines()[1].endswith("; no majority says which one is off"), out


def test_a_straggler_is_a_note_with_the_time_it_costs(run_cli, capsys):
    """Rank 2 sleeps 150 ms per step (several times a step's work, also on a busy machine): a note naming it
    and the time the others lose; exit 0."""
    run_dir = planted(run_cli, 4, "--inject-slow-rank", "2", "--inject-slow-ms", "150", steps=12)
    code, out, report = diff(capsys, run_dir)
    assert code == 0, out
    (note,) = report["notes"]
    assert (note["kind"], note["rank"], note["steps"]) == ("straggler", 2, 12) and note["lost_ms"] > 75, out


# -- faults that hang the job: stopped by SIGTERM once the logs show the parting -------------------------------
def hang(tmp_path: Path, *args: str) -> str:
    """Start train.py on 4 ranks with a fault that hangs the job; once its logs show where the allreduces
    part, stop it as `timeout` would (SIGTERM to the launcher's process group). Its run directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_"))}
    env.update(PYTHONPATH=str(REPO), DISTVLOG_LOG_DIR=str(tmp_path / "logs"))
    command = [sys.executable, "-m", "distvlog", "launch", "-n", "4", TRAIN, "--data", "synthetic", "--steps", "6"]
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen(
            [*command, *args], env=env, cwd=tmp_path, stdout=out, stderr=err, start_new_session=True
        )
    try:
        deadline, sizes, quiet = time.monotonic() + HANG_GUARD_S, None, 0
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            now = _written(tmp_path / "logs")
            quiet, sizes = (quiet + 1 if now == sizes else 0), now
            if quiet >= QUIET_POLLS and _parted(tmp_path / "logs"):
                break
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=HANG_GUARD_S)
    return run_dir_of((tmp_path / "err").read_text())


def _written(root: Path) -> tuple[int, ...]:
    """How much each rank file of the run holds: unchanged while every rank is stuck (a rank still on its
    way to the hang, slowed by a loaded machine, still logs)."""
    return tuple(content_size(p) for p in sorted(root.glob("*-launch*/rank-*")))


def _parted(root: Path) -> bool:
    """Whether the logs under `root` show the ranks' allreduces parting (all four files written)."""
    runs = [p for p in root.glob("*-launch*") if p.is_dir() and len(list(p.glob("rank-*"))) == 4]
    try:
        report = diff_tool.analyse(diff_tool.load([str(runs[0])])) if runs else None
    except InputError:  # files without records yet
        return False
    return report is not None and any(type(f).__name__ == "CollectivesPart" for f in report.errors)


def test_one_allreduce_more_on_one_rank(tmp_path, capsys):
    """Rank 1 runs a second backward at step 2: its sequence of allreduces parts from the others' there."""
    code, out, report = diff(
        capsys, hang(tmp_path, "--inject-extra-allreduce-rank", "1", "--inject-extra-allreduce-step", "2")
    )
    assert code == 1
    part = next(f for f in report["errors"] if f["kind"] == "collectives_part")
    assert (part["ranks"], part["step"], part["how"], part["began"]) == ([1], 2, "more", [2, 0]), out
    assert "rank 1 began step 2 bucket 0 as allreduce #6 where ranks 0,2,3 began none: one allreduce more" in out


def test_one_allreduce_fewer_on_one_rank(tmp_path, capsys):
    """Rank 2 runs step 3's backward without syncing: it began no allreduce where the others began one."""
    code, out, report = diff(
        capsys, hang(tmp_path, "--inject-skip-allreduce-rank", "2", "--inject-skip-allreduce-step", "3")
    )
    assert code == 1
    part = first_error(report)
    assert (part["kind"], part["ranks"], part["step"], part["how"]) == ("collectives_part", [2], 3, "fewer"), out
    assert "rank 2 began no allreduce #6 where ranks 0,1,3 began step 3 bucket 0: one allreduce fewer" in out
