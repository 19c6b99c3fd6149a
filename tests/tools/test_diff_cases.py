"""`distvlog diff` on real runs of a small script that goes wrong in one way each (SCENARIO, launched on 2 or 4
ranks), for what launch/train.py cannot plant, and on hand-written logs of ranks whose logs end early."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from test_diff import allreduce, backward, write_logs

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


REPO = Path(__file__).resolve().parents[2]


def launch(tmp_path: Path, n: int, script: Path, *args: str, fails: bool = False) -> Path:
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


def scenario(tmp_path: Path, n: int, *args: str, fails: bool = False) -> str:
    """The run directory of SCENARIO ARGS on n ranks."""
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO)
    return str(launch(tmp_path, n, script, *args, fails=fails))


def diff(cli_args: list[str], capsys) -> tuple[int, str]:
    code = main(["diff", *cli_args])
    return code, capsys.readouterr().out


def test_an_earlier_nan_on_a_rank_is_not_hidden_by_a_later_origin_there(tmp_path, capsys):
    """A NaN entering the logged region at step 1 (the optimizer skips that step), then a new origin at step
    3 on the same rank: both are reported, the first one first."""
    run_dir = scenario(tmp_path, 2, "skipnan")
    code, out = diff([run_dir], capsys)
    assert code == 1
    assert re.search(r"^NaN/Inf first seen: rank 1 step 1 linear\d+GradNode grad_out .*: 4 NaN, 0 Inf", out, re.M), out
    assert re.search(r"^  then NaN/Inf origin: rank 1 step 3 pow\d+GradNode grad_x .*: 0 NaN, \d+ Inf$", out, re.M), out
    code, out = diff(["--json", run_dir], capsys)
    first = json.loads(out)["errors"][0]
    assert (first["kind"], first["how"], first["rank"], first["step"]) == ("nan_origin", "first seen", 1, 1)


def test_a_gradient_changed_after_its_allreduce_is_found_before_the_check_that_failed(tmp_path, capsys):
    """Rank 1 changes a gradient after its allreduce at step 1: the parameters part at step 2 (first), then
    the failed parameter check at the end names rank 1 as its culprit."""
    run_dir = scenario(tmp_path, 3, "gradmod", fails=True)
    code, out = diff([run_dir], capsys)
    assert code == 1
    lines = out.splitlines()
    assert lines[1].startswith("parameters part: rank 1's parameters differ from those of ranks 0,2 from step 2 on"), (
        out
    )
    assert lines[2].startswith(
        "  then DataParallel check failed on rank 1 step 3: parameters are not identical across replicas"
    ) and lines[2].endswith("ranks 0,2 stopped because of it"), out


def test_one_missing_op_is_one_step_of_desync_not_every_later_one(tmp_path, capsys):
    """Rank 1 skips one op at step 1 only: its later node names shift, but one step differs."""
    run_dir = scenario(tmp_path, 4, "skip")
    code, out = diff([run_dir], capsys)
    assert code == 1
    assert re.search(
        r"^desync: rank 1 step 1 node #1: ran relu2GradNode where ranks 0,2,3 ran multiply2GradNode "
        r"\(1 step differs\)$",
        out,
        re.M,
    ), out
    assert out.count("\n") == 2, out


def test_two_ranks_that_differ_are_both_named(tmp_path, capsys):
    """With two ranks a desync has no majority: both sides are named."""
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
    (entry,) = json.loads(out)["errors"]
    assert [g[0] for g in entry["groups"]] == [[0], [1]] and entry["kind"] == "desync"


def test_without_dataparallel_an_unlogged_backward_does_not_shift_the_steps(tmp_path, capsys):
    """Without DataParallel, steps are each rank's logged backward passes: an unlogged one shifts nothing."""
    run_dir = scenario(tmp_path, 2, "nodp")
    code, out = diff([run_dir], capsys)
    assert (code, out.splitlines()[0], out.splitlines()[-1]) == (
        0,
        "2 ranks, 4 steps: 72 gradient statistics (aligned by each rank's logged backward passes, counted from 0)",
        "no divergence found by the checks that could run",
    )


def test_a_rank_that_dies_mid_backward_is_no_desync(tmp_path, capsys):
    """Rank 1 exits in step 2 after its first allreduces began: unfinished allreduces, no desync."""
    run_dir = scenario(tmp_path, 2, "die", fails=True)
    code, out = diff([run_dir], capsys)
    assert code == 1
    assert "desync" not in out, out
    # which of its step-2 records a rank wrote before the end depends on when each was stopped
    assert re.search(r"allreduce step 2 buckets? [\d,]+: ranks? [\d,]+ began (it|them) and never finished", out), out


def test_logs_that_end_early_and_allreduces_a_rank_never_began(tmp_path, capsys):
    """Two ranks wait in an allreduce that a third never began, whose logs end a step earlier."""
    done = [line for step in (0, 1) for line in backward(step) + allreduce(step, 0, "aaaa")]
    stuck = backward(0) + allreduce(0, 0, "aaaa") + backward(1) + allreduce(1, 0, None)
    logs = write_logs(tmp_path, {0: stuck, 1: backward(0) + allreduce(0, 0, "aaaa"), 2: stuck, 3: done})
    code, out = diff([logs], capsys)
    assert code == 1
    assert out.splitlines()[1:4] == [
        "the logs of rank 1 end at step 0 (those of ranks 0,2,3 go on to step 1)",
        "  then allreduces part: rank 1 began no allreduce #1 where ranks 0,2,3 began step 1 bucket 0: one allreduce "
        "fewer (or its logs stop before it); MPI pairs collectives in order, so from here on they are mismatched",
        "  then allreduce step 1 bucket 0: ranks 0,2 began it and never finished; rank 1 never began it",
    ], out
