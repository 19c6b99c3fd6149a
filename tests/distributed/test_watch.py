"""`distvlog watch`, `launch --watch` and `distvlog stacks` on real running jobs (launch/train.py on 4 MPI
ranks, tests/distributed/watch_jobs.py): the verdicts watch gives live are the ones `diff` gives afterwards
(same kind, step and ranks), a hang is explained with the stacks of both sides and --stop-on-error ends the
job, a pause in Python is a note, and `stacks` answers from a rank blocked in an allreduce."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from launch_testkit import LIVE_GUARD_S, finish, live_run_dir

from distvlog.cli import main
from distvlog.tools.diff import analyse, as_dict, load
from distvlog.tools.diff._gradients import history, points, series
from distvlog.tools.watch import VERDICT
from distvlog.tools.watch._live import Judge

REPO = Path(__file__).resolve().parents[2]
TRAIN = str(REPO / "launch" / "train.py")
JOBS = str(Path(__file__).with_name("watch_jobs.py"))
HANG_AFTER = ("--hang-after", "3")


def env_for(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_"))}
    return {**env, "PYTHONPATH": str(REPO), "DISTVLOG_LOG_DIR": str(tmp_path / "logs")}


def cli(tmp_path: Path, *args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "distvlog", *args],
        env=env_for(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **popen,
    )


def verdicts(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def same(finding: dict) -> tuple:
    """What a verdict and diff's finding must agree on: kind, step, the ranks named."""
    ranks = finding.get("ranks") or [finding.get("rank")]
    return finding["kind"], finding["step"], sorted(ranks)


def diff_of(capsys, run_dir: Path) -> tuple[int, dict]:
    code = main(["diff", "--json", str(run_dir)])
    return code, json.loads(capsys.readouterr().out)


def test_watch_gives_diffs_verdicts_while_the_job_runs(tmp_path, capsys):
    """Four faults planted on four ranks (another graph, a bit flip, an explosion, a NaN): watch, started
    beside the job, names each with diff's culprit and step, earliest first, the first while the job still
    runs; both exit 1."""
    faults = ["--inject-graph-rank", "3", "--inject-graph-step", "1", "--inject-bitflip-rank", "1"]
    faults += ["--inject-bitflip-step", "2", "--inject-explode-rank", "0", "--inject-explode-step", "4"]
    faults += ["--inject-nan-rank", "2", "--inject-nan-step", "6"]
    job = cli(tmp_path, "launch", "-n", "4", TRAIN, "--data", "synthetic", "--steps", "20", *faults)
    watch = cli(tmp_path, "watch", "--json", str(live_run_dir(tmp_path / "logs", 4)))
    code, out, err = finish(watch)
    assert finish(job)[0] == 0
    live = verdicts(out)
    assert code == 1, err
    diff_code, report = diff_of(capsys, live_run_dir(tmp_path / "logs", 4))
    assert diff_code == 1
    assert [same(v) for v in live if v["error"]] == [same(f) for f in report["errors"]], out
    assert [same(v) for v in live[:4]] == [
        ("desync", 1, [3]),
        ("parameters_part", 3, [1]),
        ("explosion", 4, [0]),
        ("nan_origin", 6, [2]),
    ]
    assert live[0]["live"] is True, out


def test_steps_judged_as_they_finish_give_what_one_judgement_of_them_all_gives(tmp_path):
    """Watch judges only the norms of the steps not judged yet (with the history of the earlier ones, which an
    explosion is judged by), so that they cost the same at step 10,000 as at step 10: judged a step at a time
    or a few at a time, the run's errors are the ones a single judgement of every step finds."""
    fault = ["--inject-explode-rank", "1", "--inject-explode-step", "7", "--inject-nan-rank", "2"]
    fault += ["--inject-nan-step", "8"]
    job = cli(tmp_path, "launch", "-n", "4", TRAIN, "--data", "synthetic", "--steps", "10", *fault)
    assert finish(job)[0] == 0
    logs = load([str(live_run_dir(tmp_path / "logs", 4))])
    end = max(mine.last_step for mine in logs.ranks.values()) + 1
    whole = [same(as_dict(f)) for f in analyse(logs.before(end)).errors]
    assert whole[0] == ("explosion", 7, [1]), whole
    for stride in (1, 2, 3, 5):
        judge, found = Judge(), []
        for step in [*range(1, end, stride), end]:
            found += [key for f in judge.up_to(logs, step) if (key := same(as_dict(f))) not in found]
        assert sorted(found) == sorted(whole), stride
    # each norm is judged by the same peers and history in a window as in the whole run
    judged = {(p.rank, p.step, p.where): (p.peers, p.history) for p in points(logs, series(logs))}
    for first in range(1, end):
        carried = history(series(logs.before(first)), {})
        assert analyse(logs.before(first), {}, norms_since=0).history == carried
        for p in points(logs, series(logs, first), carried):
            assert (p.peers, p.history) == judged[(p.rank, p.step, p.where)], (first, p)


def test_one_allreduce_fewer_hangs_and_stop_on_error_ends_the_job_by_its_pids(tmp_path, capsys):
    """Rank 2 skips step 3's allreduces: watch (not the job's launcher) names it as diff does, then says
    which ranks wait in which allreduce with the stacks of both sides, and stops the job with SIGTERM to the
    ranks' pids; every rank's file ends with the verdict."""
    fault = ("--inject-skip-allreduce-rank", "2", "--inject-skip-allreduce-step", "3")
    job = cli(tmp_path, "launch", "-n", "4", TRAIN, "--data", "synthetic", "--steps", "40", *fault)
    run_dir = live_run_dir(tmp_path / "logs", 4)
    code, out, err = finish(cli(tmp_path, "watch", "--json", "--stop-on-error", *HANG_AFTER, str(run_dir)))
    assert finish(job)[0] != 0  # stopped
    assert code == 1 and "sent SIGTERM to ranks 0-3" in err, err
    found = verdicts(out)
    first = found[0]
    assert (first["kind"], first["ranks"], first["step"], first["how"]) == ("collectives_part", [2], 3, "fewer"), out
    hang = next(v for v in found if v["kind"] == "hang")
    assert hang["error"] is True
    waits = {tuple(w["ranks"]): (w["step"], w["bucket"], w["finished"]) for w in hang["allreduces"]}
    assert waits[(0, 1, 3)] == (3, 0, False) and waits[(2,)][2] is True, out
    stacks = "\n".join(hang["stacks"])
    assert "ranks 0,1,3: blocked in C, main thread at train.py:" in stacks
    assert "self.comm.Allreduce(" in stacks and "MPI.COMM_WORLD.allreduce(" in stacks  # both sides
    diff_code, report = diff_of(capsys, run_dir)
    assert same(report["errors"][0]) == same(first)
    for rank in range(4):
        last = (run_dir / f"rank-{rank}.log").read_text().splitlines()[-1]
        assert f"[rank {rank}] {VERDICT}allreduces part: rank 2 began no allreduce #6" in last, last


def test_launch_watch_explains_one_allreduce_more_and_stops_the_job(tmp_path):
    """`launch --watch --stop-on-error`: rank 1 runs a second backward at step 2; the verdicts (desync, the
    allreduces part, the hang with both sides' stacks) come out as the job runs, and the launcher stops it."""
    fault = ("--inject-extra-allreduce-rank", "1", "--inject-extra-allreduce-step", "2")
    launch = ["launch", "-n", "4", "--watch", "--stop-on-error", *HANG_AFTER, TRAIN, "--data", "synthetic"]
    code, out, err = finish(cli(tmp_path, *launch, "--steps", "40", *fault))
    assert code == 1 and "distvlog watch: stopping the job through its launcher" in err, err
    lines = out.splitlines()
    assert lines[0].startswith("desync: rank 1 step 2 "), out
    assert "the same nodes 2 times, 2 backward passes in one step" in lines[0]
    hang = next(i for i, line in enumerate(lines) if line.startswith("hang: "))
    assert "rank 1 wait in allreduce #6 (step 2 bucket 0)" in lines[hang] or "rank 1 " in lines[hang], out
    assert any(line.startswith("  rank 1: blocked in C, main thread at train.py:") for line in lines), out
    assert any(line.startswith("  ranks 0,2,3: blocked in C, main thread at train.py:") for line in lines), out


def test_a_pause_in_python_on_every_rank_is_a_note(tmp_path):
    """Every rank sleeps in Python longer than --hang-after (`launch --watch`: watching from the start): a
    pause, a note naming where the ranks are, no error."""
    code, out, err = finish(cli(tmp_path, "launch", "-n", "4", "--watch", *HANG_AFTER, JOBS, "pause"))
    assert code == 0 and "; 0 errors found\n" in err, out + err
    lines = out.splitlines()
    pause = next(i for i, line in enumerate(lines) if "(an evaluation, a checkpoint?): " in line)
    assert lines[pause].startswith("pause: ") and lines[pause].endswith("; ranks 0-3 running Python"), out
    assert lines[pause + 1] == "  ranks 0-3: running Python, main thread at watch_jobs.py:46", out


def test_stacks_of_a_live_job_with_ranks_blocked_in_an_allreduce(tmp_path):
    """Ranks 0-2 wait in an allreduce rank 3 has not entered (it sleeps in Python): `stacks` groups them,
    says where each group's main thread is and in what state, and the job goes on afterwards. A request
    written without a signal (from another host) is answered too, by the ranks' polling thread."""
    gate = tmp_path / "gate"
    job = cli(tmp_path, "launch", "-n", "4", JOBS, "blocked", str(gate))
    run_dir = live_run_dir(tmp_path / "logs", 4)
    deadline = time.monotonic() + LIVE_GUARD_S
    while sum("ready" in p.read_text() for p in run_dir.glob("rank-*.log")) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    code, out, err = finish(cli(tmp_path, "stacks", str(run_dir)))
    (run_dir / "stacks.request").write_text("from-another-host-1\n")  # no signal: as a requester elsewhere asks
    while sum("request=from-another-host-1" in p.read_text() for p in run_dir.glob("rank-*.log")) < 4:
        assert time.monotonic() < deadline, "the ranks did not notice a request without a signal"
        time.sleep(0.2)
    gate.touch()
    assert finish(job)[0] == 0
    assert code == 0, out + err
    assert out.splitlines()[0] == f"stacks of 4 ranks ({run_dir}), grouped by identical stack:"
    blocked = out.index("ranks 0-2: blocked in C, main thread at watch_jobs.py:")
    python = out.index("rank 3: running Python, main thread at watch_jobs.py:")
    assert "comm.Allreduce(MPI.IN_PLACE" in out[blocked:python] and "time.sleep(0.05)" in out[python:], out


def test_a_healthy_job_with_a_slow_rank_gets_no_error(tmp_path):
    """Adam, allreduces overlapping backward, rank 1 slower: watch (default hang threshold) ends with the job
    and finds no error."""
    slow = ("--inject-slow-rank", "1", "--inject-slow-ms", "40")
    launch = ["launch", "-n", "4", "--watch", TRAIN, "--data", "synthetic", "--optimizer", "adam", "--overlap"]
    code, out, err = finish(cli(tmp_path, *launch, "--steps", "12", *slow))
    assert code == 0, err
    assert "; 0 errors found\n" in err, err
    assert all(line.startswith(("note: ", "  ")) for line in out.splitlines()), out
