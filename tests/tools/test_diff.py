"""`distvlog diff`: on a real NaN-injected data-parallel run, and on small hand-written logs for each
kind of finding."""

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
TRAIN = REPO / "launch" / "train.py"
POISON_LINE = next(i for i, line in enumerate(TRAIN.read_text().splitlines(), 1) if "** 0.5" in line)


def launch(tmp_path: Path, n: int, *args: str, script: Path = TRAIN, fails: bool = False) -> Path:
    """The run directory of `distvlog launch -n N SCRIPT ARGS` (which must fail when `fails`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_"))}
    env.update(PYTHONPATH=str(REPO), DISTVLOG_LOG_DIR=str(tmp_path / "logs"))
    proc = subprocess.run(
        [sys.executable, "-m", "distvlog", "launch", "-n", str(n), str(script), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert (proc.returncode != 0) == fails, proc.stderr
    return Path(re.search(r"distvlog launch: logs: (\S+)/ \(", proc.stderr).group(1))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n,bad_rank", [(4, 2), (2, 1)])
def test_nan_origin_on_the_right_rank_and_node(tmp_path, capsys, n, bad_rank):
    run_dir = launch(tmp_path, n, "--steps", "5", "--inject-nan-rank", str(bad_rank), "--inject-nan-step", "2")
    assert main(["diff", str(run_dir)]) == 1
    text = capsys.readouterr().out
    assert re.search(
        rf"^NaN/Inf origin: rank {bad_rank} step 2 pow\d+GradNode grad_x \(forward at "
        rf"train.py:{POISON_LINE}\): \d+ NaN, 0 Inf$",
        text,
        re.M,
    ), text
    others = ",".join(str(r) for r in range(n) if r != bad_rank)
    assert (
        f"\n  then NaN/Inf on rank{'s' if n > 2 else ''} {others} from step 3: arrived through the allreduce of "
        f"step 2 from rank {bad_rank}\n"
    ) in text, text
    assert main(["diff", "--json", str(run_dir)]) == 1
    origin = json.loads(capsys.readouterr().out)["nan_origin"]
    assert (origin["rank"], origin["step"], origin["slot"], origin["site"]) == (
        bad_rank,
        2,
        "grad_x",
        f"train.py:{POISON_LINE}",
    )


@pytest.mark.timeout(300)
def test_a_healthy_run_is_clean(tmp_path, capsys):
    run_dir = launch(tmp_path, 3, "--steps", "3")  # with 2 ranks the outlier check cannot run
    assert main(["diff", str(run_dir)]) == 0
    assert capsys.readouterr().out.endswith("no divergence found\n")


# -- hand-written logs ----------------------------------------------------------------------------------
def stat(node: str, slot: str, norm: float = 1.0, nan: int = 0, step: int = 0, run: int = 1) -> str:
    return (
        f"grad_stats node={node} pass={run} v=5 slot={slot} tensor=t@Grad site=model.py:7 shape=2x2 "
        f"dtype=float32 norm={norm} min=0.0 max=1.0 mean=0.5 nan={nan} inf=0 checksum=00000000 step={step}"
    )


def backward(step: int, extra: str | None = None, norm: float = 1.0) -> list[str]:
    nodes = ["matmul1GradNode", "tanh1GradNode"] + ([extra] if extra else [])
    return [
        line
        for node in nodes
        for line in (stat(node, "grad_out", norm, step=step), stat(node, "grad_x", norm, step=step))
    ]


def write_logs(tmp_path: Path, per_rank: dict[int, list[str]]) -> str:
    for rank, messages in per_rank.items():
        lines = [
            f"I1130 02:29:{10 + i // 1000:02d}.{i % 1000:06d} 100 engine.py:1] [rank {rank}] {m}\n"
            for i, m in enumerate(messages)
        ]
        (tmp_path / f"rank-{rank}.log").write_text("".join(lines))
    return str(tmp_path)


def allreduce(step: int, bucket: int, checksum: str | None) -> list[str]:
    lines = [f"allreduce begin v=1 step={step} bucket={bucket} bytes=16"]
    if checksum:
        lines += [
            f"allreduce end v=1 step={step} bucket={bucket} checksum={checksum}",
            f"allreduce param v=2 step={step} bucket={bucket} param=fc.w_0 checksum={checksum}",
        ]
    return lines


def test_desync_names_the_rank_step_and_node(tmp_path, capsys):
    logs = write_logs(
        tmp_path,
        {0: backward(0) + backward(1), 1: backward(0) + backward(1, "add3GradNode"), 2: backward(0) + backward(1)},
    )
    assert main(["diff", logs]) == 1
    assert (
        "desync: rank 1 step 1 node #2: ran 3 nodes where ranks 0,2 ran 2 (1 step differs)" in capsys.readouterr().out
    )


def test_allreduce_results_that_differ_and_allreduces_never_finished(tmp_path, capsys):
    logs = write_logs(
        tmp_path,
        {
            0: allreduce(0, 0, "aaaa") + allreduce(1, 0, "cccc"),
            1: allreduce(0, 0, "aaaa") + allreduce(1, 0, None),
            2: allreduce(0, 0, "bbbb") + allreduce(1, 0, "cccc"),
        },
    )
    assert main(["diff", logs]) == 1
    out = capsys.readouterr().out
    assert "allreduce step 0 bucket 0: result differs on rank 2 from ranks 0,1 (parameters fc.w_0)" in out
    assert "allreduce step 1 bucket 0: rank 1 began it and never finished" in out


def test_norm_outlier(tmp_path, capsys):
    logs = write_logs(tmp_path, {0: backward(0), 1: backward(0, norm=1.3), 2: backward(0, norm=250.0)})
    assert main(["diff", "--outlier-factor", "100", logs]) == 1
    out = capsys.readouterr().out
    assert (
        "outlier: rank 2 step 0 matmul1GradNode grad_out (forward at model.py:7): norm 250, median over ranks 0,1: "
        "1.15 (and 3 more gradients there)\n" in out
    ), out
    assert "rank 1" not in out


def test_nan_entering_the_logged_region_is_first_seen(tmp_path, capsys):
    logs = write_logs(
        tmp_path,
        {0: backward(0), 1: [stat("tanh1GradNode", "grad_out", nan=4), stat("tanh1GradNode", "grad_x", nan=4)]},
    )
    assert main(["diff", "--json", logs]) == 1
    origin = json.loads(capsys.readouterr().out)["nan_origin"]
    assert (origin["kind"], origin["rank"], origin["node"], origin["slot"]) == (
        "first seen",
        1,
        "tanh1GradNode",
        "grad_out",
    )


def test_json_lines_logs(tmp_path, capsys):
    lines = []
    for i, (slot, nan) in enumerate([("grad_out", 0), ("grad_x", 3)]):
        lines.append(
            json.dumps(
                {
                    "ts": 1796005765715285 + i,
                    "severity": "I",
                    "v": 5,
                    "rank": 1,
                    "world_size": 2,
                    "tid": 1,
                    "file": "nodelog.py",
                    "line": 1,
                    "event": "grad_stats",
                    "node": "log1GradNode",
                    "pass": 1,
                    "slot": slot,
                    "site": "m.py:3",
                    "norm": 1.0,
                    "nan": nan,
                    "inf": 0,
                    "step": 0,
                }
            )
        )
    (tmp_path / "rank-1.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["diff", str(tmp_path / "rank-1.jsonl")]) == 1
    out = capsys.readouterr().out
    assert "NaN/Inf origin: rank 1 step 0 log1GradNode grad_x (forward at m.py:3): 3 NaN, 0 Inf" in out


@pytest.mark.parametrize(
    "args,message",
    [
        (["no/such/dir"], "no/such/dir"),
        (["--outlier-factor", "1", "."], "--outlier-factor 1.0: must be a finite number greater than 1"),
        (["--outlier-factor", "nan", "."], "--outlier-factor nan: must be a finite number greater than 1"),
        (["--outlier-factor", "inf", "."], "--outlier-factor inf: must be a finite number greater than 1"),
    ],
)
def test_unusable_input_exits_2_with_one_line(tmp_path, capsys, args, message):
    assert main(["diff", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("distvlog diff: error: ") and message in err[0]


def test_logs_without_gradient_statistics_are_unusable(tmp_path, capsys):
    logs = write_logs(tmp_path, {0: ["train step loss=0.5"]})
    assert main(["diff", logs]) == 2
    assert "no gradient statistics" in capsys.readouterr().err


def test_a_merged_timeline_counts_the_ranks_in_its_records(tmp_path):
    from tools_logfiles import T0, ours

    from distvlog.tools import diff

    run = tmp_path / "run"
    run.mkdir()
    for r in range(3):
        line = f"I grad_stats node=mul1GradNode slot=grad_x step=0 norm=1.0 nan=0 inf=0 checksum=0000000{r}"
        (run / f"rank-{r}.log").write_text(ours(r, [(T0 + 10 * r, line)], world=3))
    assert main(["merge", str(run), "-o", str(tmp_path / "timeline.log")]) == 0
    assert diff.load([str(tmp_path / "timeline.log")]).ranks == {0, 1, 2}
