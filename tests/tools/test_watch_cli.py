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


@pytest.mark.parametrize("value", ["0", "nan", "soon"])
def test_a_hang_threshold_that_is_no_time_is_refused(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exit_:
        main(["watch", "--hang-after", value, str(tmp_path)])
    assert exit_.value.code == 2
    assert f"distvlog watch: error: argument --hang-after: '{value}': expected a positive" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--stop-on-error"], "--stop-on-error: needs --watch"),
        (["--hang-after", "3"], "--hang-after: needs --watch"),
        (["--watch", "--follow"], "--watch and --follow: choose one (both take the terminal)"),
    ],
)
def test_launch_refuses_watch_options_without_watch(tmp_path, capsys, options, said):
    script = tmp_path / "job.py"
    script.write_text("")
    assert main(["launch", "-n", "2", *options, str(script)]) == 2
    assert capsys.readouterr().err == f"distvlog launch: error: {said}\n"
