"""A bad distvlog setting in a job's environment is named once per job, not once per rank (and again by the
launcher and each rank's parent): every process reads the same environment. Real ranks."""

from __future__ import annotations

BAD = {"DISTVLOG_V": "abc"}
WARNING = "distvlog: ignoring DISTVLOG_V='abc': not an integer (using 0)"


def warnings_in(text: str) -> list[str]:
    return [line for line in text.splitlines() if "ignoring" in line]


def test_plain_mpirun_names_a_bad_setting_once(run_mpi, rank_results):
    """Under plain mpirun rank 0 says it; the other ranks use the default as silently."""
    proc = run_mpi(3, "finalize", env=BAD)
    rank_results(proc)
    assert warnings_in(proc.stdout + proc.stderr) == [WARNING]


def test_distvlog_launch_names_a_bad_setting_once(run_cli, tmp_path):
    """Under `distvlog launch` the launcher says it, before the ranks start; they stay quiet."""
    script = tmp_path / "job.py"
    script.write_text("import distvlog as dv\ndv.init()\ndv.get_logger('job').info('ran')\n")
    proc = run_cli("launch", "-n", "2", str(script), env=BAD)
    assert proc.returncode == 0, proc.stderr
    assert warnings_in(proc.stdout + proc.stderr) == [WARNING]
