"""Where records go: `<log_dir>/<run_id>/rank-<R>.log`, the `latest` link, one run directory per job
shared by its ranks, never another run's files, no symlinks followed; what goes to stderr."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from logger_testkit import GLOG_PREFIX, finish, read_glog, wait_for_line

from distvlog.logger import LAUNCHER_VARS, rank_from_env

LOGS = """
import os
import distvlog.logger as dlog
log = dlog.get_logger()
log.info("first info")
log.info("second info", step=1)
log.warning("careful")
log.error("broken")
log.vlog(0, "verbose zero")
print(os.getpid())
"""


def _stderr_records(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if GLOG_PREFIX.match(line)]


def _path_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("distvlog:")]


def test_layout_latest_link_and_stderr(scripts):
    run = scripts.run(LOGS, env={"DISTVLOG_RUN_ID": "run-a"})
    path = scripts.log_dir / "run-a" / "rank-0.log"
    assert run.files() == [path]
    assert os.readlink(scripts.log_dir / "latest") == "run-a"
    assert _path_lines(run.proc.stderr) == [f"distvlog: rank 0 (pid {run.proc.stdout.strip()}) logs to {path}"]
    assert [r[0] for r in _stderr_records(run.proc.stderr)] == ["W", "E"]  # WARNING and above are echoed
    assert [r.first for r in read_glog(path).records] == [
        "first info",
        "second info step=1",
        "careful",
        "broken",
        "verbose zero v=0",
    ]


def test_alsologtostderr_echoes_everything_and_latest_moves_on(scripts):
    scripts.run(LOGS, env={"DISTVLOG_RUN_ID": "run-a"})
    run = scripts.run(LOGS, env={"DISTVLOG_ALSOLOGTOSTDERR": "1"})
    assert [r[0] for r in _stderr_records(run.proc.stderr)] == ["I", "I", "W", "E", "I"]
    assert len(_path_lines(run.proc.stderr)) == 1
    [path] = [p for p in run.files() if p.parent.name != "run-a"]  # default run id: start time and pid
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-{run.proc.stdout.strip()}", path.parent.name)
    assert read_glog(path).meta["run_id"] == path.parent.name
    assert os.readlink(scripts.log_dir / "latest") == path.parent.name


def _clear_launcher_env(monkeypatch) -> None:
    for pair in LAUNCHER_VARS:
        for var in pair:
            monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, (0, 1)),
        ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"}, (3, 4)),
        ({"PMI_RANK": "1", "PMI_SIZE": "2"}, (1, 2)),
        ({"PMIX_RANK": "5", "PMIX_SIZE": "8"}, (5, 8)),
        ({"RANK": "2", "WORLD_SIZE": "3"}, (2, 3)),
        ({"SLURM_PROCID": "6", "SLURM_NTASKS": "7"}, (6, 7)),
        ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "RANK": "0", "WORLD_SIZE": "8"}, (1, 2)),
        ({"PMI_RANK": "4"}, (4, 5)),
        ({"PMI_RANK": "", "RANK": "1", "WORLD_SIZE": "2"}, (1, 2)),
    ],
)
def test_rank_from_launcher_environment(monkeypatch, env, expected):
    _clear_launcher_env(monkeypatch)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert rank_from_env() == expected


@pytest.mark.parametrize(
    "env, warning, expected",
    [
        ({"PMI_RANK": "one"}, "PMI_RANK='one': not an integer (using rank 0 of 1)", (0, 1)),
        ({"RANK": "-1"}, "RANK='-1': negative (using rank 0 of 1)", (0, 1)),
        (
            {"SLURM_PROCID": "4", "SLURM_NTASKS": "4"},
            "SLURM_PROCID='4': not below SLURM_NTASKS=4 (using rank 0 of 1)",
            (0, 1),
        ),
        (
            {"PMI_RANK": "0", "PMI_SIZE": "two", "SLURM_PROCID": "2", "SLURM_NTASKS": "3"},
            "PMI_SIZE='two': not an integer (using rank 2 of 3)",
            (2, 3),
        ),
    ],
)
def test_a_launcher_with_a_bad_value_is_named_and_skipped(monkeypatch, env_warnings, env, warning, expected):
    _clear_launcher_env(monkeypatch)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert rank_from_env() == expected
    assert env_warnings() == [f"distvlog: ignoring {warning}"]


def _job(scripts, ranks: int, env: dict[str, str], rank_vars=("PMI_RANK", "PMI_SIZE")) -> None:
    """Run LOGS as `ranks` processes started together (one launcher: this test process)."""
    procs = [scripts.start(LOGS, env={rank_vars[0]: str(r), rank_vars[1]: str(ranks), **env}) for r in range(ranks)]
    for proc in procs:
        rc, out, err = finish(proc)
        assert rc == 0, err


def _ranks_in(run_dir) -> dict[str, int]:
    return {p.name: read_glog(p).meta["rank"] for p in run_dir.iterdir()}


def test_ranks_of_a_job_share_a_run_dir_and_a_reused_run_id_moves_on(scripts):
    _job(scripts, 2, {"DISTVLOG_RUN_ID": "shared"})
    first = {p: p.read_bytes() for p in (scripts.log_dir / "shared").iterdir()}
    assert _ranks_in(scripts.log_dir / "shared") == {"rank-0.log": 0, "rank-1.log": 1}
    for path in first:
        assert {r.rank for r in read_glog(path).records} == {read_glog(path).meta["rank"]}
    _job(scripts, 2, {"DISTVLOG_RUN_ID": "shared"})  # the same id again: a new run, .1
    assert _ranks_in(scripts.log_dir / "shared.1") == {"rank-0.log": 0, "rank-1.log": 1}
    assert {p: p.read_bytes() for p in (scripts.log_dir / "shared").iterdir()} == first
    assert os.readlink(scripts.log_dir / "latest") == "shared.1"


def test_ranks_agree_on_a_run_id_without_being_told(scripts):
    _job(scripts, 2, {}, ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"))
    run_dirs = [p for p in scripts.log_dir.iterdir() if p.name != "latest"]
    assert len(run_dirs) == 1 and _ranks_in(run_dirs[0]) == {"rank-0.log": 0, "rank-1.log": 1}


def test_a_script_run_alone_leaves_latest_at_the_last_job_and_says_so(scripts):
    """`latest` is what the tools read for a log root: a single process that no launcher started does not
    take it from a job of several ranks (it says where `latest` stays); it does take it from another single
    process, and a job takes it from anyone."""
    _job(scripts, 2, {"DISTVLOG_RUN_ID": "job"})
    alone = scripts.run(LOGS, env={"DISTVLOG_RUN_ID": ""})
    assert os.readlink(scripts.log_dir / "latest") == "job"
    path = next(p for p in alone.files() if p.parent.name != "job")
    assert f"logs to {path} (latest stays at job, a job of several ranks)" in alone.proc.stderr
    (scripts.log_dir / "latest").unlink()
    scripts.run(LOGS, env={"DISTVLOG_RUN_ID": ""})
    again = scripts.run(LOGS, env={"DISTVLOG_RUN_ID": ""})
    path = max((p for p in again.files() if p.parent.name != "job"), key=lambda p: p.stat().st_mtime)
    assert os.readlink(scripts.log_dir / "latest") == path.parent.name and "latest stays" not in again.proc.stderr
    _job(scripts, 2, {"DISTVLOG_RUN_ID": "job2"})
    assert os.readlink(scripts.log_dir / "latest") == "job2"


@pytest.mark.parametrize("kind", ["file", "fifo"])
def test_a_symlink_in_place_of_a_rank_file_is_not_followed(scripts, kind):
    victim = scripts.tmp / "victim"
    victim.write_text("precious\n") if kind == "file" else os.mkfifo(victim)
    (scripts.log_dir / "run").mkdir(parents=True)
    (scripts.log_dir / "run" / "rank-0.log").symlink_to(victim)
    try:
        run = scripts.run(LOGS, env={"DISTVLOG_RUN_ID": "run"}, timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("the logger blocked on the symlink's target") from None
    if kind == "file":
        assert victim.read_text() == "precious\n"
    assert (scripts.log_dir / "run" / "rank-0.log").is_symlink()
    path = scripts.log_dir / "run.1" / "rank-0.log"
    assert [p for p in run.files() if not p.is_symlink()] == [path]
    assert len(read_glog(path).records) == 5


def test_a_symlink_in_place_of_a_run_dir_is_not_followed(scripts):
    victim = scripts.tmp / "victim"
    victim.mkdir()
    scripts.log_dir.mkdir()
    (scripts.log_dir / "run").symlink_to(victim)
    run = scripts.run(LOGS, env={"DISTVLOG_RUN_ID": "run"})
    assert list(victim.iterdir()) == []
    assert _path_lines(run.proc.stderr) == [
        f"distvlog: cannot log to {scripts.log_dir / 'run'}: not a directory "
        "(symlinks are not followed); logging to stderr"
    ]


@pytest.mark.parametrize("also_to_stderr", ["0", "1"])
@pytest.mark.parametrize("log_dir, reason", [("a-file", "File exists"), ("a-file/logs", "Not a directory")])
def test_an_unusable_log_dir_sends_every_record_to_stderr_once(scripts, log_dir, reason, also_to_stderr):
    (scripts.tmp / "a-file").write_text("not a directory\n")
    before = sorted(scripts.tmp.rglob("*"))
    run = scripts.run(
        LOGS + "print(dlog.log_file_path())\n",
        name="logs.py",
        env={"DISTVLOG_LOG_DIR": str(scripts.tmp / log_dir), "DISTVLOG_ALSOLOGTOSTDERR": also_to_stderr},
    )
    lines = run.proc.stderr.splitlines()
    assert lines[0] == f"distvlog: cannot log to {scripts.tmp / log_dir}: {reason}; logging to stderr"
    assert [line.split("] [rank 0] ")[1] for line in lines[1:]] == [
        "first info",
        "second info step=1",
        "careful",
        "broken",
        "verbose zero v=0",
    ]
    assert all(GLOG_PREFIX.match(line) for line in lines[1:])
    assert run.proc.stdout.split()[-1] == "None"  # no log file
    assert sorted(p for p in scripts.tmp.rglob("*") if p.name != "logs.py") == before


HELPER = """
import os, subprocess, sys
import distvlog.logger as dlog
dlog.get_logger().info("rank process")
subprocess.run([sys.executable, "-c", "import distvlog.logger as d; d.get_logger().info('helper')"], check=True)
"""


def test_a_helper_process_of_a_rank_joins_its_run(scripts):
    """A process the rank starts (same rank, same run id in its environment) writes rank-R.<pid>.log next to
    its parent's file, also when a reused run id moved the parent on to <run_id>.1."""
    for run_id in ("helped", "helped.1"):
        scripts.run(HELPER, env={"DISTVLOG_RUN_ID": "helped"})
        files = {f.name: [r.first for r in read_glog(f).records] for f in (scripts.log_dir / run_id).iterdir()}
        assert files.pop("rank-0.log") == ["rank process"]
        [(name, records)] = files.items()
        assert re.fullmatch(r"rank-0\.\d+\.log", name) and records == ["helper"]


RUNNING = """
import time
import distvlog.logger as dlog
dlog.get_logger().info("first job")
dlog.flush()
print("ready", flush=True)
time.sleep(120)
"""


def test_a_concurrent_job_with_the_same_run_id_gets_its_own_run(scripts):
    first = scripts.start(RUNNING, env={"DISTVLOG_RUN_ID": "same"})
    try:
        wait_for_line(first, "ready")
        scripts.run(LOGS, env={"DISTVLOG_RUN_ID": "same"})
    finally:
        first.kill()
        finish(first)
    assert [p.name for p in (scripts.log_dir / "same").iterdir()] == ["rank-0.log"]
    assert len(read_glog(scripts.log_dir / "same.1" / "rank-0.log").records) == 5


CRASHING_TOOL = """
import sys
import distvlog.tools.merge as merge
from distvlog.cli import command
def run(args):
    raise RuntimeError("a bug in the tool")
merge.run = run
sys.argv = ["distvlog", "merge", "anything"]
sys.exit(command())
"""


def test_the_distvlog_tools_write_no_log_file_even_when_they_crash(scripts):
    """Their records are no rank's: a crash must not start a run in the user's log directory (and move
    `latest` away from the run the user is reading)."""
    run = scripts.run(CRASHING_TOOL, rc=1)
    assert "RuntimeError: a bug in the tool" in run.proc.stderr  # Python's traceback, once
    assert run.proc.stderr.count("Traceback") == 1
    assert not scripts.log_dir.exists() and not (scripts.tmp / "distvlog_logs").exists()


def test_a_rank_of_several_sends_only_its_warnings_to_stderr_and_counts_the_rest(scripts):
    """An unusable log directory under a job of several ranks: each rank says so once, writes its warnings and
    errors to stderr and says at exit how many records it left out (a thousand ranks' info records would bury
    the console)."""
    (scripts.tmp / "a-file").write_text("not a directory\n")
    run = scripts.run(LOGS, env={"DISTVLOG_LOG_DIR": str(scripts.tmp / "a-file"), "PMI_RANK": "1", "PMI_SIZE": "4"})
    lines = run.proc.stderr.splitlines()
    assert lines[0] == f"distvlog: cannot log to {scripts.tmp / 'a-file'}: File exists; warnings and errors to stderr"
    assert [line.split("] [rank 1] ")[1] for line in lines if GLOG_PREFIX.match(line)] == ["careful", "broken"]
    assert lines[-1] == "distvlog: rank 1: 3 records below WARNING were not written"
