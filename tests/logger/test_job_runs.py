"""How a job's ranks agree on one run without being told: SLURM's job and step (its variables as srun sets
them), a claim in the log root for the first rank's UTC time, a new run for every job started in the same
second; and the tools naming the parts of a job an older distvlog split across run directories."""

from __future__ import annotations

import calendar
import os
import re
import subprocess
import sys
import time

from logger_testkit import finish, read_glog

from distvlog.logger import _rundir

LOGS = """
import os
import distvlog.logger as dlog
dlog.get_logger().info("hello", tz=os.environ.get("TZ", ""))
"""


def _job(scripts, ranks: int, env: dict[str, str], rank_vars=("SLURM_PROCID", "SLURM_NTASKS"), zones=("UTC",)):
    """Start `ranks` processes of LOGS as one job's ranks (each rank in the next of `zones`); the Popens."""
    return [
        scripts.start(LOGS, env={rank_vars[0]: str(r), rank_vars[1]: str(ranks), "TZ": zones[r % len(zones)], **env})
        for r in range(ranks)
    ]


def _wait(procs) -> None:
    for proc in procs:
        rc, _, err = finish(proc)
        assert rc == 0, err


def _runs(scripts) -> dict[str, list[str]]:
    return {
        run.name: sorted(p.name for p in run.iterdir())
        for run in scripts.log_dir.iterdir()
        if run.is_dir() and not run.is_symlink() and not run.name.startswith(".")
    }


def _utc_of(run_id: str) -> float:
    return calendar.timegm(time.strptime(run_id[:15], "%Y%m%d-%H%M%S"))


def test_slurm_ranks_in_two_time_zones_share_the_run_of_their_job_step(scripts):
    """srun's tasks (here two processes with its variables) of one step: one run, named after the job and
    step, with the first rank's time in UTC; the next step of the job is another run, as is the batch step."""
    _wait(_job(scripts, 2, {"SLURM_JOB_ID": "812", "SLURM_STEP_ID": "0"}, zones=("Asia/Tokyo", "America/Chicago")))
    [(run, files)] = _runs(scripts).items()
    assert re.fullmatch(r"\d{8}-\d{6}-slurm-812\.0", run) and files == ["rank-0.log", "rank-1.log"]
    created = min(read_glog(scripts.log_dir / run / f).meta["created_us"] for f in files) / 1e6
    assert abs(_utc_of(run) - created) < 60  # UTC, not Tokyo's or Chicago's time
    assert os.readlink(scripts.log_dir / "latest") == run
    _wait(_job(scripts, 2, {"SLURM_JOB_ID": "812", "SLURM_STEP_ID": "1"}))
    _wait(_job(scripts, 2, {"SLURM_JOB_ID": "812"}))
    names = sorted(name[16:] for name in _runs(scripts))
    assert names == ["slurm-812.0", "slurm-812.1", "slurm-812.batch"]
    assert all(files == ["rank-0.log", "rank-1.log"] for files in _runs(scripts).values())


def test_jobs_started_in_the_same_second_never_share_a_run(scripts):
    """Two SLURM jobs and two single processes, all started together: four runs, a single process's named
    by its pid and the UTC time."""
    procs = _job(scripts, 2, {"SLURM_JOB_ID": "1", "SLURM_STEP_ID": "0"})
    procs += _job(scripts, 2, {"SLURM_JOB_ID": "2", "SLURM_STEP_ID": "0"})
    procs += [scripts.start(LOGS, env={"TZ": "Asia/Tokyo"}) for _ in range(2)]
    _wait(procs)
    runs = _runs(scripts)
    singles = {str(p.pid) for p in procs[4:]}
    assert sorted(name[16:] for name in runs if name[16:] not in singles) == ["slurm-1.0", "slurm-2.0"]
    assert {name[16:] for name in runs} - {"slurm-1.0", "slurm-2.0"} == singles
    assert all(abs(_utc_of(name) - time.time()) < 600 for name in runs)
    assert sorted(len(files) for files in runs.values()) == [1, 1, 2, 2]


def test_a_claim_names_one_run_for_a_day_then_a_new_one(tmp_path):
    """The first rank's candidate wins; a claim a day old is an earlier job's with the same tag."""
    first = _rundir.claim_run(tmp_path, "hydra-0000beef", "20261205-101010-hydra-0000beef")
    assert first == "20261205-101010-hydra-0000beef"
    assert _rundir.claim_run(tmp_path, "hydra-0000beef", "20261205-101011-hydra-0000beef") == first
    old = time.time() - _rundir.CLAIM_KEPT_S - 60
    os.utime(tmp_path / ".jobs" / "hydra-0000beef", (old, old), follow_symlinks=False)
    later = "20261206-101500-hydra-0000beef"
    assert _rundir.claim_run(tmp_path, "hydra-0000beef", later) == later
    assert _rundir.claim_run(tmp_path, "hydra-0000beef", "20261206-101501-hydra-0000beef") == later
    assert sorted(p.name for p in (tmp_path / ".jobs").iterdir()) == ["hydra-0000beef", "hydra-0000beef.1"]


def _tool(scripts, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "distvlog", *args],
        env=scripts.env(),
        cwd=scripts.tmp,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tools_name_the_parts_of_a_job_split_across_runs(scripts):
    """A job whose ranks named their runs apart (a run per host proxy, as distvlog did before run ids were
    agreed per job): reading one part names the other; both together are read as one job. A run of
    another world size next to it is no part."""
    rank_vars = {"PMI_SIZE": "2"}
    _wait([scripts.start(LOGS, env={**rank_vars, "PMI_RANK": str(r), "DISTVLOG_RUN_ID": f"part{r}"}) for r in (0, 1)])
    _wait([scripts.start(LOGS, env={"PMI_RANK": "1", "PMI_SIZE": "3", "DISTVLOG_RUN_ID": "other"})])
    part0, part1 = scripts.log_dir / "part0", scripts.log_dir / "part1"
    one = _tool(scripts, "merge", str(part0))
    assert one.returncode == 0
    assert f"warning: no log read from rank 1 of 2; {part1} holds it: one job split across run directories" in (
        one.stderr
    )
    assert f"give {part0} and it together" in one.stderr
    both = _tool(scripts, "merge", str(part0), str(part1))
    assert both.returncode == 0 and "no log read" not in both.stderr
    assert f"warning: {part0}, {part1}: one job split across run directories" in both.stderr
    assert all(f"[rank {r}] hello" in both.stdout for r in (0, 1))
    alone = _tool(scripts, "merge", str(scripts.log_dir / "other"))
    assert "no log read from ranks 0,2 of 3\n" in alone.stderr and "split" not in alone.stderr
