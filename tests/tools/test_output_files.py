"""Every file the tools write goes through one safe writer: never through a symlink, never over an input,
whole or not at all (a temporary file renamed into place), streams (/dev/null, a FIFO) in place."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest
from tools_logfiles import ROOT, T0, ours

RECORDS = [(T0 + i, f"E error {i}") for i in range(30)]


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for rank in range(2):
        (run / f"rank-{rank}.log").write_text(ours(rank, RECORDS, world=2))
    return run


def command(tool: str, run, out) -> list:
    return {
        "merge": ["merge", run, "-o", out],
        "trace": ["trace", run, "-o", out],
        "diff": ["diff", "--json", run, "-o", out],
    }[tool]


@pytest.mark.parametrize("tool", ["merge", "trace", "diff"])
def test_a_symlink_planted_at_the_output_is_refused_and_its_target_untouched(tmp_path, cli, run, tool):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    (tmp_path / "out").symlink_to(victim)
    code, _, err = cli(*command(tool, run, tmp_path / "out"))
    assert code == 2 and "a symbolic link" in err and "refusing to write through it" in err
    assert victim.read_text() == "keep me" and (tmp_path / "out").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "precious.txt", "run"]  # no temp file left


@pytest.mark.parametrize("tool", ["merge", "trace", "diff"])
def test_an_input_as_the_output_is_refused_and_stays_whole(tmp_path, cli, run, tool):
    """`trace A B -o A` once destroyed A; also through a link to the input."""
    before = (run / "rank-0.log").read_bytes()
    for target in (run / "rank-0.log", tmp_path / "link-to-input"):
        if target.name == "link-to-input":
            target.symlink_to(run / "rank-0.log")
        code, _, err = cli(*command(tool, run, target))
        assert code == 2 and "one of the input files" in err and err.count("\n") == 1
        assert (run / "rank-0.log").read_bytes() == before


@pytest.mark.parametrize("tool", ["merge", "trace", "diff"])
def test_the_output_is_written_whole_with_the_users_umask(tmp_path, cli, run, tool):
    out = tmp_path / "out"
    out.write_text("old")
    old_mask = os.umask(0o027)
    try:
        code, _, _ = cli(*command(tool, run, out))
    finally:
        os.umask(old_mask)
    assert code in (0, 1) and out.read_text() != "old" and (out.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "run"]


def test_a_full_file_system_leaves_the_old_output_as_it_was(tmp_path, run):
    """A file-size limit (RLIMIT_FSIZE in the child) stops the merge mid-output: one line, exit 2, the old
    file unchanged and no temporary file left."""
    out = tmp_path / "out.log"
    out.write_text("old")

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    proc = subprocess.run(
        [sys.executable, "-m", "distvlog", "merge", str(run), "-o", str(out)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        preexec_fn=limit,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith("distvlog merge: error: -o ")
    assert "File too large" in proc.stderr and "Traceback" not in proc.stderr
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.log", "run"]


def test_devices_and_fifos_are_written_in_place_and_a_fifo_nobody_reads_is_refused(tmp_path, cli, run):
    code, _, _ = cli("merge", run, "-o", os.devnull)
    assert code == 0 and os.path.exists(os.devnull)
    os.mkfifo(tmp_path / "pipe")
    code, _, err = cli("merge", run, "-o", tmp_path / "pipe")
    assert code == 2 and "a FIFO that nobody reads" in err
