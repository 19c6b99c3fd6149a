"""`distvlog diff RUN_A RUN_B` on real runs of launch/train.py: the same command twice is bitwise identical
(1 rank, 4 ranks with overlap, 8 without: our engine's training is deterministic), and each planted departure
is named with its step, place and cause: the numerics changed from step 5 (within rounding), another
learning rate, another seed, another world size."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from distvlog.cli import main

REPO = Path(__file__).resolve().parents[2]
TRAIN = str(REPO / "launch" / "train.py")
SOURCE = Path(TRAIN).read_text().splitlines()
HANG_TIMEOUT_S = 240  # against hangs only
STEPS = "6"
BASE = ("--data", "synthetic", "--steps", STEPS, "--lr", "0.01")

pytestmark = pytest.mark.timeout(600)


def _env(logs: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_"))}
    return {**env, "PYTHONPATH": str(REPO), "DISTVLOG_LOG_DIR": str(logs)}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "distvlog", *args],
        env=_env(cwd / "logs"),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT_S,
    )


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """job(n, *args, again=False) -> the run directory of train.py on n ranks (each asked-for run once a module)."""
    done: dict[tuple, str] = {}

    def run(n: int, *args: str, again: bool = False) -> str:
        key = (n, args, again)
        if key not in done:
            where = tmp_path_factory.mktemp("run")
            proc = cli("launch", "-n", str(n), TRAIN, *BASE, *args, cwd=where)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            done[key] = re.search(r"distvlog launch: logs: (\S+)/ \(", proc.stderr).group(1)
        return done[key]

    return run


def diff(capsys, run_a: str, run_b: str, *options: str) -> tuple[int, str, dict]:
    """The text and the JSON verdict of `diff RUN_A RUN_B` (one exit code for both)."""
    code = main(["diff", run_a, run_b, *options])
    text = capsys.readouterr().out
    assert main(["diff", run_a, "--against", run_b, "--json", *options]) == code
    return code, text, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("n", "args"),
    [(1, ()), (4, ("--overlap",)), (8, ("--guard-level", "6"))],
    ids=["1-rank", "4-ranks-overlap", "8-ranks-checksums"],
)
def test_the_same_command_twice_is_bitwise_identical(job, capsys, n, args):
    """Same seed, same command: every parameter digest, loss, node gradient, bucket checksum and allreduce
    result of every rank and step is equal (no false departure)."""
    code, out, report = diff(capsys, job(n, *args), job(n, *args, again=True))
    assert code == 0, out
    assert out.splitlines()[1].startswith("bitwise identical: every value compared is equal"), out
    assert report["verdict"] == "identical" and report["identical_steps"] == int(STEPS) + 1
    assert set(report["compared"]) == {
        "parameter digests",
        "losses",
        "node gradients",
        "bucket gradients",
        "allreduce results",
    }
    assert report["compared"]["losses"] == n * int(STEPS)
    assert ("by their norms" in out) == ("--guard-level" not in args)


def test_numerics_changed_from_step_5_departs_within_rounding_there(job, capsys):
    """Every rank sums its batch in another order from step 5: run B departs within rounding at step 5, at a
    guarded node named with its forward line; exit 0, or 1 with --bitwise."""
    base, changed = job(4, "--overlap"), job(4, "--overlap", "--inject-numerics-step", "5")
    code, out, report = diff(capsys, base, changed)
    assert code == 0, out
    head = out.splitlines()[1]
    assert re.match(
        r"departs within rounding at step 5: node (relu|linear)\d+GradNode grad_\w+ \(forward at train.py:\d+\) on ranks? ",
        head,
    ), out
    assert "within float rounding (--rtol 1e-05): a different summation order or kernel" in head
    assert "  before it: bitwise identical at steps 0-4" in out
    departure = report["departure"]
    assert (departure["step"], departure["cause"], departure["within_rounding"]) == (5, "rounding", True)
    assert 0 < departure["largest"] < 1e-6
    assert main(["diff", base, changed, "--bitwise"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "--bitwise: a departure within rounding is an error"
    assert main(["diff", base, changed, "--rtol", "1e-9"]) == 1
    assert capsys.readouterr().out.splitlines()[1].startswith("departs at step 5: ")


def test_another_learning_rate_departs_at_the_first_update(job, capsys):
    """--lr 0.011 against --lr 0.01: step 0 identical, every parameter differs as step 1 starts: the update."""
    code, out, report = diff(capsys, job(4, "--overlap"), job(4, "--overlap", "--lr", "0.011"))
    assert code == 1
    assert out.splitlines()[1].startswith(
        "departs at step 1: the parameters as step 1 starts differ (6 of 6: linear_0.w_0, linear_0.b_0, "
    ), out
    assert "although every value of step 0 compared was identical: the update differs: another learning rate" in out
    assert report["departure"]["cause"] == "update" and report["departure"]["step"] == 1


def test_another_seed_departs_at_step_0(job, capsys):
    """--seed 1: the initial parameters differ: another initial state."""
    code, out, report = diff(capsys, job(4, "--overlap"), job(4, "--overlap", "--seed", "1"))
    assert code == 1
    assert out.splitlines()[1].startswith("departs at step 0: the initial parameters differ ("), out
    assert "another initial state: another seed or initialisation" in out.splitlines()[1]
    assert (report["departure"]["step"], report["departure"]["cause"]) == (0, "initial")


def test_4_ranks_against_8_compares_the_runs_as_wholes(job, capsys):
    """Another world size: the parameters (identical at step 0), the mean loss and the allreduce results are
    compared; per-rank losses and local gradients are named as not compared, and why."""
    code, out, report = diff(capsys, job(4, "--overlap"), job(8, "--guard-level", "6"))
    assert code == 1
    assert set(report["compared"]) == {"parameter digests", "losses", "allreduce results"}
    assert report["departure"]["step"] == 0 and report["departure"]["parameters"] == []
    assert "  the parameters were identical as step 0 started" in out
    assert "expected: run A has 4 ranks, run B 8, so every rank trains on another shard" in out
    assert (
        "not compared: per-rank losses and local gradients (guarded nodes, buckets): run A has 4 ranks, run B 8" in out
    )


def test_bad_input_is_one_line_and_exit_2(job, capsys, tmp_path):
    """A missing RUN_B, --against with two runs, --rtol without two runs: one line naming it, exit 2."""
    base = job(4, "--overlap")
    for args, said in (
        (("diff", base, "--against", str(tmp_path / "nope")), f"{tmp_path / 'nope'}: no such file or directory"),
        (("diff", base, base, "--against", base), "--against"),
        (("diff", base, "--rtol", "1e-3"), "--rtol and --bitwise compare two runs"),
        (("diff", base, "--against", base, "--rtol", "nan"), "--rtol nan: must be a finite number"),
    ):
        assert main(list(args)) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and said in err, err


def test_report_draws_both_runs_with_the_departure_marked(job, capsys, tmp_path):
    """`report RUN_A RUN_B`: the verdict on top, then both runs' curves on the same plots (loss, step time,
    norms) and how far apart they are, the departure's step marked."""
    out = tmp_path / "runs.html"
    assert main(["report", job(4, "--overlap"), job(4, "--overlap", "--lr", "0.011"), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert re.fullmatch(r"distvlog report: run B departs at step 1, \d+ plots of both runs to \S+\n", err), err
    page = out.read_text()
    assert "departs at step 1: the parameters as step 1 starts differ" in page
    for title in (
        "largest relative difference of run B from run A",
        "loss",
        "step time (ms)",
        "local gradient norm, bucket 0",
    ):
        assert f'"text":"{title}"' in page, title
    assert page.count('"name":"run A"') >= 3 and "B departs at step 1" in page
