"""`distvlog diff` on small hand-written logs: the wording and judgement of each kind of finding, the exit
code, the JSON, unusable input. (Real runs with planted faults: tests/distributed/test_diff_faults.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distvlog import format as fmt
from distvlog.cli import main


# -- writing logs ----------------------------------------------------------------------------------------
def fields(**values) -> str:
    """The fields as the logger writes them (lists and dicts as JSON)."""
    return fmt.pairs_of(values).lstrip()


def stat(node: str, slot: str, norm: float = 1.0, nan: int = 0, step: int = 0, run: int = 1) -> str:
    return (
        f"grad_stats node={node} pass={run} v=5 slot={slot} tensor=t@Grad site=model.py:7 shape=2x2 "
        f"dtype=float32 norm={norm} nan={nan} inf=0 step={step}"
    )


def backward(step: int, extra: str | None = None, norm: float = 1.0) -> list[str]:
    nodes = ["matmul1GradNode", "tanh1GradNode"] + ([extra] if extra else [])
    return [
        line
        for node in nodes
        for line in (stat(node, "grad_out", norm, step=step), stat(node, "grad_x", norm, step=step))
    ]


def allreduce(step: int, bucket: int, checksum: str | None, norm: float = 1.0, wait_us: int = 100) -> list[str]:
    lines = [f"allreduce begin v=1 step={step} bucket={bucket} bytes=16 checksum=00{step} norm={norm}"]
    if checksum:
        lines += [
            f"allreduce end v=1 step={step} bucket={bucket} checksum={checksum} wait_us={wait_us}",
            f"allreduce param v=2 step={step} bucket={bucket} param=fc.w_0 checksum={checksum}",
        ]
    return lines


def layout(names: list[str], buckets: list[list[int]]) -> str:
    return f"parameter layout v=1 {fields(names=names, buckets=buckets)}"


def parameters(step: int, digests: list[str] | None = None) -> str:
    return f"parameters v=1 step={step}" + (f" {fields(digests=digests)}" if digests else "")


def write_logs(tmp_path: Path, per_rank: dict[int, list[str]], ms_per_record: int = 1) -> str:
    for rank, messages in per_rank.items():
        lines = []
        for i, m in enumerate(messages):
            us = i * ms_per_record * 1000
            lines.append(
                f"I1130 02:{29 + us // 60_000_000:02d}:{us // 1_000_000 % 60:02d}.{us % 1_000_000:06d} "
                f"100 engine.py:1] [rank {rank}] {m}\n"
            )
        (tmp_path / f"rank-{rank}.log").write_text("".join(lines))
    return str(tmp_path)


def diff(capsys, *args: str) -> tuple[int, str]:
    code = main(["diff", *args])
    return code, capsys.readouterr().out


def said(out: str) -> list[str]:
    """The report's lines but its summary and what it could not check (the logs here are partial)."""
    return [line for line in out.splitlines()[1:] if not line.startswith("not checked:")]


def trained(steps: int, digests=lambda step: ["a", "b"], norm=lambda step: 1.0, wait_us=lambda step: 100) -> list[str]:
    """A rank's DataParallel records for `steps` steps: layout, parameters, one bucket's allreduce."""
    lines = [layout(["fc.w_0", "fc.b_0"], [[1, 0]])]
    for step in range(steps):
        lines.append(parameters(step, digests(step)))
        lines += allreduce(step, 0, f"r{step}", norm(step), wait_us(step))
    return lines


# -- errors ----------------------------------------------------------------------------------------------
def test_desync_names_the_rank_step_and_node(tmp_path, capsys):
    """A rank whose backward ran another node sequence than the majority's is named with the step."""
    logs = write_logs(
        tmp_path,
        {0: backward(0) + backward(1), 1: backward(0) + backward(1, "add3GradNode"), 2: backward(0) + backward(1)},
    )
    code, out = diff(capsys, logs)
    assert code == 1
    assert "desync: rank 1 step 1 node #2: ran 3 nodes where ranks 0,2 ran 2 (1 step differs)" in out, out


def test_allreduce_results_that_differ_and_allreduces_never_finished(tmp_path, capsys):
    """Different results of one allreduce, and one a rank began and never finished, are errors."""
    logs = write_logs(
        tmp_path,
        {
            0: allreduce(0, 0, "aaaa") + allreduce(1, 0, "cccc"),
            1: allreduce(0, 0, "aaaa") + allreduce(1, 0, None),
            2: allreduce(0, 0, "bbbb") + allreduce(1, 0, "cccc"),
        },
    )
    code, out = diff(capsys, logs)
    assert code == 1
    assert "allreduce step 0 bucket 0: result differs on rank 2 from ranks 0,1 (parameters fc.w_0)" in out
    assert "allreduce step 1 bucket 0: rank 1 began it and never finished" in out


def test_an_exploding_gradient_names_the_rank_step_bucket_and_node(tmp_path, capsys):
    """A local gradient norm orders of magnitude above its peers' and anything before is an error naming
    the rank, the step, the bucket's parameters and the first guarded node where it shows."""
    per_rank = {}
    for rank in range(3):
        boom = 1e6 if rank == 2 else 1.0
        lines = trained(6, norm=lambda step, boom=boom: boom if step == 4 else 1.0)
        lines += [s for step in range(6) for s in backward(step, norm=boom if step == 4 else 1.0)]
        per_rank[rank] = lines
    code, out = diff(capsys, write_logs(tmp_path, per_rank))
    assert code == 1
    assert out.splitlines()[1] == (
        "gradient explosion: rank 2 step 4 first seen at matmul1GradNode grad_out (forward at model.py:7), "
        "bucket 0 (fc.b_0, fc.w_0): local norm 1e+06, 1e+06x its peers' largest (1), 1e+06x the largest "
        "before (1)"
    ), out


def test_a_small_local_gradient_is_not_an_error_nor_a_note(tmp_path, capsys):
    """A rank whose local gradient is 1000x smaller than its peers' (a batch the model fits already) is
    healthy: exit 0, nothing said."""
    per_rank = {rank: trained(6, norm=lambda step, r=rank: 1e-3 if r == 1 and step == 3 else 1.0) for rank in range(3)}
    code, out = diff(capsys, write_logs(tmp_path, per_rank))
    assert (code, said(out)) == (0, ["no divergence found by the checks that could run"]), out


def test_a_spike_short_of_an_explosion_is_a_note_that_keeps_exit_0(tmp_path, capsys):
    """A gradient 50x above everything before is unusual, not a fault: a note under its own heading."""
    per_rank = {rank: trained(6, norm=lambda step, r=rank: 50.0 if r == 0 and step == 5 else 1.0) for rank in range(3)}
    code, out = diff(capsys, write_logs(tmp_path, per_rank))
    assert code == 0
    assert said(out) == [
        "notes (unusual, not errors: they never change the exit code):",
        "  gradient spike: rank 0 step 5 bucket 0 (fc.b_0, fc.w_0): local norm 50, 50x its peers' and anything "
        "seen before (1)",
        "no divergence found by the checks that could run",
    ], out


def test_parameters_that_part_name_the_minority_the_step_and_the_parameter(tmp_path, capsys):
    """Digests that differ on one rank from step 3 on, after allreduces that agreed: that rank changed one
    parameter after the allreduce of step 2."""
    bad = {0: lambda s: ["a", "b"], 1: lambda s: ["a", "b"], 2: lambda s: ["a", "X" if s >= 3 else "b"]}
    code, out = diff(capsys, write_logs(tmp_path, {r: trained(5, digests=bad[r]) for r in range(3)}))
    assert code == 1
    assert out.splitlines()[1] == (
        "parameters part: rank 2's parameters differ from those of ranks 0,1 from step 3 on (1 of 2 parameters: "
        "fc.b_0), although the allreduces of step 2 gave every rank the same gradients: rank 2 changed its "
        "gradients or parameters after the allreduce — only these parameters: their values were changed (a bit "
        "flip, a stray write)"
    ), out


def test_parameters_that_part_between_two_ranks_name_both(tmp_path, capsys):
    """With two ranks there is no majority: both are named, and the report says so."""
    per_rank = {0: trained(4), 1: trained(4, digests=lambda s: ["a", "b"] if s < 1 else ["c", "d"])}
    code, out = diff(capsys, write_logs(tmp_path, per_rank))
    assert code == 1
    assert out.splitlines()[1].startswith(
        "parameters part: ranks 0,1 hold different parameters from step 1 on (2 of 2 parameters: fc.w_0, fc.b_0), "
        "although the allreduces of step 0 gave every rank the same gradients"
    ) and out.splitlines()[1].endswith("; no majority says which one is off"), out


def test_parameters_that_differ_before_any_update_point_at_the_broadcast(tmp_path, capsys):
    """Digests that differ at step 0 on one rank: it skipped the initial broadcast."""
    per_rank = {r: trained(3, digests=lambda s, r=r: ["z", "b"] if r == 1 else ["a", "b"]) for r in range(3)}
    code, out = diff(capsys, write_logs(tmp_path, per_rank))
    assert code == 1
    assert out.splitlines()[1] == (
        "parameters part: rank 1's parameters differ from those of ranks 0,2 from step 0 on (1 of 2 parameters: "
        "fc.w_0): before any update — a skipped initial broadcast, or parameters changed before step 0"
    ), out


def test_a_rank_with_one_allreduce_more_is_named_where_the_sequences_part(tmp_path, capsys):
    """A second allreduce of one bucket in one step on one rank: the allreduces part there, it is named."""
    normal = [line for step in range(3) for line in allreduce(step, 0, f"r{step}")]
    extra = [line for step in range(2) for line in allreduce(step, 0, f"r{step}")] + allreduce(1, 0, None)
    code, out = diff(capsys, write_logs(tmp_path, {0: normal[:6], 1: extra, 2: normal[:6]}))
    assert code == 1
    assert out.splitlines()[1] == (
        "allreduces part: rank 1 began step 1 bucket 0 as allreduce #2 where ranks 0,2 began none: one allreduce "
        "more: a second allreduce of step 1 bucket 0 in one step; MPI pairs collectives in order, so from here "
        "on they are mismatched"
    ), out


def test_with_two_ranks_the_one_whose_own_log_shows_an_allreduce_more_is_named(tmp_path, capsys):
    """No majority with two ranks, but a second allreduce of one bucket in one step shows in rank 1's own
    log: it is named, and the report says why."""
    normal = [line for step in range(2) for line in allreduce(step, 0, f"r{step}")]
    extra = normal + allreduce(1, 0, None)
    code, out = diff(capsys, write_logs(tmp_path, {0: normal, 1: extra}))
    assert code == 1
    assert out.splitlines()[1].startswith(
        "allreduces part: rank 1 began step 1 bucket 0 as allreduce #2 where rank 0 began none: one allreduce more: "
        "a second allreduce of step 1 bucket 0 in one step; with no majority, rank 1's own log shows it;"
    ), out


def test_a_second_backward_in_one_step_is_said_as_such(tmp_path, capsys):
    """A rank that ran the others' nodes twice in one step ran two backward passes: the desync says so."""
    logs = write_logs(
        tmp_path,
        {0: backward(0), 1: backward(0) + [s.replace("pass=1", "pass=2") for s in backward(0)], 2: backward(0)},
    )
    code, out = diff(capsys, logs)
    assert code == 1
    assert out.splitlines()[1] == (
        "desync: rank 1 step 0 node #2: ran 4 nodes where ranks 0,2 ran 2: the same nodes 2 times, 2 backward "
        "passes in one step (1 step differs)"
    ), out


def test_a_rank_that_skipped_a_steps_allreduces_is_named(tmp_path, capsys):
    """A rank that began step 2's allreduce where the others began step 1's skipped step 1's."""
    normal = [line for step in range(3) for line in allreduce(step, 0, f"r{step}")]
    skipped = allreduce(0, 0, "r0") + allreduce(2, 0, "r1")
    code, out = diff(capsys, write_logs(tmp_path, {0: normal, 1: skipped, 2: normal}))
    assert code == 1
    assert out.splitlines()[1].startswith(
        "allreduces part: rank 1 began step 2 bucket 0 as allreduce #1 where ranks 0,2 began step 1 bucket 0: one "
        "allreduce fewer: it skipped the rest of step 1's"
    ), out


def test_a_failed_dataparallel_check_names_its_culprit_once(tmp_path, capsys):
    """The check's own records: the culprit's reason, once; the others stopped because of it."""
    check = 'check="before allreduce of bucket 0 of step 3" culprits=[2]'
    per_rank = {
        r: [
            f"DataParallel check failed {check} "
            + ('reason="rank 2 step 3: gradient has NaN" step=3' if r == 2 else 'stopped_by="rank 2" step=3')
        ]
        for r in range(4)
    }
    logs = write_logs(tmp_path, per_rank)
    for r in range(4):
        text = (tmp_path / f"rank-{r}.log").read_text().replace("I1130", "E1130")
        (tmp_path / f"rank-{r}.log").write_text(text)
    code, out = diff(capsys, logs)
    assert (code, said(out)) == (
        1,
        [
            "DataParallel check failed on rank 2 step 3: rank 2 step 3: gradient has NaN; ranks 0,1,3 stopped because "
            "of it"
        ],
    ), out


def test_an_error_record_without_a_traceback_is_its_first_line(tmp_path, capsys):
    """An E record is an error, told by its first line."""
    logs = write_logs(tmp_path, {0: backward(0), 1: backward(0), 2: backward(0)})
    with open(tmp_path / "rank-1.log", "a") as f:
        f.write("E1130 02:29:11.000000 100 engine.py:1] [rank 1] bucket lost step=0\n  more detail\n")
    code, out = diff(capsys, logs)
    assert (code, said(out)) == (1, ["error: rank 1 step 0: bucket lost"]), out


# -- notes -----------------------------------------------------------------------------------------------
def test_a_straggler_is_a_note_with_the_time_lost_per_step(tmp_path, capsys):
    """A rank the others wait for at every step: a note naming it and the time lost; exit 0."""
    per_rank = {r: trained(20, wait_us=lambda s, r=r: 500 if r == 1 else 30_500) for r in range(3)}
    code, out = diff(capsys, write_logs(tmp_path, per_rank, ms_per_record=10))
    assert code == 0
    assert out.splitlines()[1:3] == [
        "notes (unusual, not errors: they never change the exit code):",
        "  straggler: rank 1: the other ranks wait for it 30 ms per step (median over 20 steps; it waits 0.5 ms, "
        "they 30.5 ms; a step takes 40 ms)",
    ], out


# -- the report ------------------------------------------------------------------------------------------
def test_json_lists_every_finding_with_its_kind_and_the_exit_code(tmp_path, capsys):
    """--json: errors and notes with their kind and fields, the exit code, the largest statistics."""
    bad = {0: lambda s: ["a", "b"], 1: lambda s: ["a", "b"], 2: lambda s: ["a", "X" if s >= 3 else "b"]}
    code, out = diff(capsys, "--json", write_logs(tmp_path, {r: trained(5, digests=bad[r]) for r in range(3)}))
    report = json.loads(out)
    (error,) = report["errors"]
    assert code == report["exit_code"] == 1
    assert (error["kind"], error["ranks"], error["others"], error["step"], error["params"], error["pattern"]) == (
        "parameters_part",
        [2],
        [0, 1],
        3,
        ["fc.b_0"],
        "some",
    )
    assert set(report["largest"]) == {"explosion", "spread_from_peers", "straggler"}


def test_nan_in_json_lines_logs(tmp_path, capsys):
    """JSON-lines logs are read as glog ones: a NaN origin with its node, slot and forward line."""
    lines = [
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
        for i, (slot, nan) in enumerate([("grad_out", 0), ("grad_x", 3)])
    ]
    (tmp_path / "rank-1.jsonl").write_text("\n".join(lines) + "\n")
    code, out = diff(capsys, str(tmp_path / "rank-1.jsonl"))
    assert code == 1
    assert "NaN/Inf origin: rank 1 step 0 log1GradNode grad_x (forward at m.py:3): 3 NaN, 0 Inf" in out


def test_every_list_stops_at_ten_lines_and_says_how_many_more(tmp_path, capsys):
    """Twelve NaN origins: ten lines, then how many more."""
    logs = write_logs(tmp_path, {rank: [stat("exp1GradNode", "grad_out", nan=1)] for rank in range(12)})
    code, out = diff(capsys, logs)
    assert code == 1
    assert out.count("NaN/Inf first seen") == 10, out
    assert "\n... 2 more nan origin (--json lists them all)\n" in out, out


def test_what_the_logs_cannot_support_is_said(tmp_path, capsys):
    """Logs with DataParallel's records only: the gradient checks are named as not checked."""
    code, out = diff(capsys, write_logs(tmp_path, {r: trained(3) for r in range(2)}))
    assert code == 0
    assert out.splitlines()[1:] == [
        "not checked: NaN/Inf origins, backward graphs, node gradient norms: no grad_stats records (the backward "
        "writes them at verbosity >= 5: backward_vlog_guard(5) or DISTVLOG_V=5)",
        "no divergence found by the checks that could run",
    ], out


@pytest.mark.parametrize("args,message", [(["no/such/dir"], "no/such/dir")])
def test_unusable_input_exits_2_with_one_line(tmp_path, capsys, args, message):
    """A path that is not there: one line on stderr, exit 2."""
    assert main(["diff", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("distvlog diff: error: ") and message in err[0]


def test_logs_without_anything_diff_reads_are_unusable(tmp_path, capsys):
    """Records, but none diff reads: exit 2, saying what it looks for."""
    assert main(["diff", write_logs(tmp_path, {0: ["train step loss=0.5"]})]) == 2
    assert "no gradient statistics" in capsys.readouterr().err


def test_a_merged_timeline_counts_the_ranks_in_its_records(tmp_path):
    """A merged timeline holds several ranks behind one header: diff reads each rank's records as its own."""
    from tools_logfiles import T0, ours

    from distvlog.tools import diff as diff_tool

    run = tmp_path / "run"
    run.mkdir()
    for r in range(3):
        line = f"I grad_stats node=mul1GradNode slot=grad_x step=0 norm=1.0 nan=0 inf=0 checksum=0000000{r}"
        (run / f"rank-{r}.log").write_text(ours(r, [(T0 + 10 * r, line)], world=3))
    assert main(["merge", str(run), "-o", str(tmp_path / "timeline.log")]) == 0
    assert set(diff_tool.load([str(tmp_path / "timeline.log")]).ranks) == {0, 1, 2}
