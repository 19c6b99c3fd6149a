"""`distvlog diff` on real runs that go wrong in one way each (SCENARIO, launched on 2 or 4 ranks), and on
small hand-written logs for the wording of its findings."""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_diff import allreduce, backward, launch, stat, write_logs

from distvlog.cli import main

# python scenario.py MODE [GUARD_LEVEL]: rank 1 misbehaves at step BAD.
SCENARIO = r"""
import os
import sys
import numpy as np
import distvlog as dv
import distvlog.nn.functional as F

mode, level = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
STEPS, BAD = 4, 1
dv.init()
dv.set_vlog_level({"parallel": 1})
rank = dv.get_rank()


class Net(dv.nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = dv.nn.Linear(8, 16), dv.nn.Linear(16, 4)

    def forward(self, x, step):
        bad = rank == 1 and step == BAD
        with dv.backward_vlog_guard(level):
            h = F.relu(self.fc1(x))
            if mode == "skip" and not bad:  # rank 1 skips one op once: its op counters differ from then on
                h = h * 1.0
            if mode == "skipnan":  # rank 1 step 3: the square root's gradient at 0 is Inf
                h = h + 1e-3 * (h - h + dv.to_tensor(np.float32(rank != 1 or step != 3))) ** 0.5
            return self.fc2(h)


dv.seed(0)
net = Net()
model = net if mode == "nodp" else dv.DataParallel(net, comm_buffer_size=0.0002, overlap=mode == "die")
state = {"step": 0}


def die(param):  # fc1 is reached last in backward: its allreduce and fc2's have begun
    if mode == "die" and rank == 1 and state["step"] == 2:
        dv.flush()
        os._exit(3)


net.fc1.weight.register_post_accumulate_grad_hook(die)
opt = dv.optim.SGD(learning_rate=0.01, parameters=model.parameters())
rng = np.random.default_rng(rank)
for step in range(STEPS):
    state["step"] = step
    x = rng.normal(size=(4, 8)).astype("float32")
    if mode == "skipnan" and rank == 1 and step == BAD:
        x[0, 0] = np.nan
    if mode == "nodp" and rank == 1 and step == BAD:  # an unlogged backward, e.g. a gradient-norm probe
        dv.grad((net.fc2.weight * net.fc2.weight).sum(), [net.fc2.weight])
    loss = F.cross_entropy(model(dv.to_tensor(x), step), dv.to_tensor(rng.integers(0, 4, 4)))
    loss.backward()
    if mode == "gradmod" and rank == 1 and step == BAD:
        model.parameters()[0].grad._data[...] += 1.0
    if all(np.isfinite(p.grad.numpy()).all() for p in model.parameters() if p.grad is not None):
        opt.step()  # skipped on every rank when a gradient is not finite, as AMP's GradScaler does
    opt.clear_grad()
if mode == "gradmod":
    model.check_parameters()
dv.finalize()
"""


def scenario(tmp_path: Path, n: int, *args: str, fails: bool = False) -> str:
    """The run directory of SCENARIO ARGS on n ranks."""
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO)
    return str(launch(tmp_path, n, *args, script=script, fails=fails))


def diff(cli_args: list[str], capsys) -> tuple[int, str]:
    code = main(["diff", *cli_args])
    return code, capsys.readouterr().out


def test_an_earlier_nan_on_a_rank_is_not_hidden_by_a_later_origin_there(tmp_path, capsys):
    run_dir = scenario(tmp_path, 2, "skipnan")
    code, out = diff([run_dir], capsys)
    assert code == 1
    assert re.search(r"^NaN/Inf first seen: rank 1 step 1 linear\d+GradNode grad_out .*: 4 NaN, 0 Inf", out, re.M), out
    # the step-1 NaN never reached the parameters (the optimizer skipped that step): step 3 is a new origin
    assert re.search(r"^  then NaN/Inf origin: rank 1 step 3 pow\d+GradNode grad_x .*: 0 NaN, \d+ Inf$", out, re.M), out
    code, out = diff(["--json", run_dir], capsys)
    first = json.loads(out)["nan_origin"]
    assert (first["kind"], first["rank"], first["step"]) == ("first seen", 1, 1)


def test_logs_without_gradient_statistics_say_what_was_not_checked(tmp_path, capsys):
    run_dir = str(
        launch(tmp_path, 2, "--steps", "3", "--guard-level", "4", "--inject-nan-rank", "1", "--inject-nan-step", "1")
    )
    code, out = diff([run_dir], capsys)
    assert code == 0  # the allreduce results could be compared, and agree
    assert (
        "not checked: NaN/Inf origins, desync, outliers: no grad_stats records (the backward writes them at "
        "verbosity >= 5" in out
    ), out
    assert out.endswith("no divergence found by the checks that could run\n")
    code, out = diff(["--json", run_dir], capsys)
    report = json.loads(out)
    assert (report["found"], report["clean"], report["not_checked"][0]["checks"]) == (
        False,
        False,
        ["NaN/Inf origins", "desync", "outliers"],
    )


def test_dataparallel_check_errors_are_findings(tmp_path, capsys):
    run_dir = scenario(tmp_path, 2, "gradmod", fails=True)  # rank 1 changes a gradient after its allreduce
    code, out = diff([run_dir], capsys)
    assert code == 1
    assert (
        "error: ranks 0,1 step 3: DataParallelError: parameters are not identical across replicas at step 3: "
        "linear_0.w_0 differs on rank 1 (rank 0 agree" in out
    ), out
    code, out = diff(["--json", run_dir], capsys)
    error = json.loads(out)["errors"][0]
    assert (error["ranks"], error["step"], error["message"].split(":")[0]) == ([0, 1], 3, "DataParallelError")


def test_an_error_record_without_a_traceback_is_its_first_line(tmp_path, capsys):
    logs = write_logs(tmp_path, {0: backward(0), 1: backward(0), 2: backward(0)})
    with open(tmp_path / "rank-1.log", "a") as f:
        f.write("E1130 02:29:11.000000 100 engine.py:1] [rank 1] bucket lost step=0\n  more detail\n")
    assert diff([logs], capsys) == (
        1,
        "3 ranks, 12 gradient statistics, 0 allreduces (aligned by step)\nerror: rank 1 step 0: bucket lost\n",
    )


def test_one_missing_op_is_one_step_of_desync_not_every_later_one(tmp_path, capsys):
    run_dir = scenario(tmp_path, 4, "skip")  # rank 1 skips `h * 1.0` at step 1: its later node names shift
    code, out = diff([run_dir], capsys)
    assert code == 1
    assert re.search(
        r"^desync: rank 1 step 1 node #1: ran relu2GradNode where ranks 0,2,3 ran multiply2GradNode "
        r"\(1 step differs\)$",
        out,
        re.M,
    ), out
    assert out.count("\n") == 2, out


def test_outliers_are_aligned_across_shifted_op_counters(tmp_path, capsys):
    shifted = [line.replace("matmul1", "matmul2").replace("tanh1", "tanh2") for line in backward(1, norm=500.0)]
    logs = write_logs(
        tmp_path,
        {
            0: backward(0) + backward(1),
            1: backward(0, "add1GradNode") + shifted,
            2: backward(0) + backward(1, norm=1.2),
        },
    )
    code, out = diff(["--json", logs], capsys)
    assert {(o["rank"], o["step"], o["node"]) for o in json.loads(out)["outliers"]} == {
        (1, 1, "matmul2GradNode"),
        (1, 1, "tanh2GradNode"),
    }


def test_without_dataparallel_an_unlogged_backward_does_not_shift_the_steps(tmp_path, capsys):
    run_dir = scenario(tmp_path, 2, "nodp")  # rank 1 runs an extra backward outside the guard at step 1
    code, out = diff([run_dir], capsys)
    assert (code, out.splitlines()[0], out.splitlines()[-1]) == (
        0,
        "2 ranks, 72 gradient statistics, 0 allreduces (aligned by each rank's logged backward passes, counted from 0)",
        "no divergence found by the checks that could run",
    )  # outliers take 3 ranks


def test_a_rank_that_dies_mid_backward_is_no_desync(tmp_path, capsys):
    run_dir = scenario(tmp_path, 2, "die", fails=True)  # rank 1 exits in step 2, after its first allreduces began
    code, out = diff([run_dir], capsys)
    assert code == 1
    assert "desync" not in out, out
    # which of its step-2 records a rank wrote before the end depends on when each was stopped
    assert re.search(
        r"^allreduce step 2 buckets? [\d,]+: ranks? [\d,]+ began (it|them) and never finished", out, re.M
    ), out


def test_logs_that_end_early_and_allreduces_a_rank_never_began(tmp_path, capsys):
    done = [line for step in (0, 1) for line in backward(step) + allreduce(step, 0, "aaaa")]
    stuck = backward(0) + allreduce(0, 0, "aaaa") + backward(1) + allreduce(1, 0, None)
    logs = write_logs(tmp_path, {0: stuck, 1: backward(0) + allreduce(0, 0, "aaaa"), 2: stuck, 3: done})
    code, out = diff([logs], capsys)
    assert (code, out.splitlines()[1:]) == (
        1,
        [
            "allreduce step 1 bucket 0: ranks 0,2 began it and never finished; rank 1 never began it",
            "the logs of rank 1 end at step 0 (those of ranks 0,2,3 go on to step 1)",
        ],
    )


def test_two_ranks_that_differ_are_both_named(tmp_path, capsys):
    run_dir = scenario(tmp_path, 2, "skip")
    code, out = diff([run_dir], capsys)
    assert code == 1
    assert re.search(
        r"^desync: ranks 0,1 differ at step 1 node #1, no majority says which is off: rank 0 ran "
        r"multiply2GradNode, rank 1 ran relu2GradNode \(1 step differs\)$",
        out,
        re.M,
    ), out
    code, out = diff(["--json", run_dir], capsys)
    (entry,) = json.loads(out)["desync"]
    assert [g["ranks"] for g in entry["groups"]] == [[0], [1]] and entry["kind"] == "no majority"


def test_every_list_stops_at_ten_lines_and_says_how_many_more(tmp_path, capsys):
    logs = write_logs(tmp_path, {rank: [stat("exp1GradNode", "grad_out", nan=1)] for rank in range(12)})
    code, out = diff([logs], capsys)
    assert code == 1
    assert out.count("NaN/Inf first seen") == 10 and out.endswith("\n  ... 2 more\n"), out
    reduced = {
        rank: [line for step in range(12) for line in allreduce(step, 0, "bbbb" if rank == 2 else "aaaa")]
        for rank in range(3)
    }
    (tmp_path / "reduced").mkdir()
    code, out = diff([write_logs(tmp_path / "reduced", reduced)], capsys)
    assert out.count("result differs on rank 2") == 10 and "\n  ... 2 more\n" in out, out


def test_a_two_two_split_in_gradient_norms_blames_neither_side(tmp_path, capsys):
    logs = write_logs(
        tmp_path, {0: backward(0), 1: backward(0, norm=100.0), 2: backward(0, norm=1.2), 3: backward(0, norm=120.0)}
    )
    code, out = diff([logs], capsys)
    assert (code, out.splitlines()[1:]) == (
        1,
        [
            "norm split: step 0 matmul1GradNode grad_out (forward at model.py:7): ranks 0,2 at 1 to 1.2, ranks 1,3 at 100 "
            "to 120; no majority says which is off (and 3 more gradients there)"
        ],
    )


def test_a_rank_far_off_is_an_outlier_even_when_a_chain_of_ranks_joins_it_to_the_others(tmp_path, capsys):
    norms = [1.0, 1.0, 1.0, 8.0, 64.0]  # each neighbour less than 10x apart; rank 4 is 64x off the majority
    logs = write_logs(tmp_path, {rank: backward(0, norm=norm) for rank, norm in enumerate(norms)})
    code, out = diff(["--json", logs], capsys)
    outliers = json.loads(out)["outliers"]
    assert code == 1 and {(o["rank"], o["ratio"]) for o in outliers} == {(4, 64.0)}


def test_with_two_ranks_the_report_says_outliers_were_not_checked(tmp_path, capsys):
    logs = write_logs(tmp_path, {0: backward(0), 1: backward(0, norm=1000.0)})
    assert diff([logs], capsys) == (
        0,
        "2 ranks, 8 gradient statistics, 0 allreduces (aligned by step)\n"
        "not checked: outliers: grad_stats from 2 ranks only: it takes 3 or more to "
        "tell which one is off\nno divergence found by the checks that could run\n",
    )
