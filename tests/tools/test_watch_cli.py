"""`distvlog watch` and `distvlog stacks` on unusable input: one line naming it, exit 2."""

from __future__ import annotations

import pytest

from distvlog.cli import main


@pytest.mark.parametrize("command", ["watch", "stacks"])
def test_a_path_that_is_no_directory_is_named(tmp_path, capsys, command):
    assert main([command, str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err == f"distvlog {command}: error: {tmp_path / 'nowhere'}: no such directory\n"


def test_stacks_of_a_run_without_rank_files(tmp_path, capsys):
    assert main(["stacks", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"distvlog stacks: error: {tmp_path}: no rank files in {tmp_path}\n"


@pytest.mark.parametrize(("option", "value"), [("--hang-after", "0"), ("--hang-after", "nan")])
def test_a_hang_threshold_that_is_no_time_is_refused(tmp_path, capsys, option, value):
    assert main(["watch", option, value, str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(f"distvlog watch: error: {option} {float(value)}: expected")
