"""A bad value in the environment never stops a program: `import distvlog` names it in one line on stderr,
once, and goes on with the default (a debugging tool must not break a job or a command over a typo)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

SETTINGS = """
import distvlog.logger as dlog
from distvlog.logger import _clock, _identity, _lifecycle, _rules, _sink
_rules._rules_from_env(), _identity.rank_from_env()  # read again: still one warning
dlog.get_logger().info("still logging")
dlog.flush()
rules = _rules.current()
print(dict(v=rules.level, vmodule=rules.patterns, format=_sink.SINK.format, suffix=_sink.SINK.path.suffix,
           flush=_lifecycle.FLUSH_INTERVAL_S, skew=_clock.SKEW_PER_RANK_US,
           rank=(dlog.IDENTITY.rank, dlog.IDENTITY.world_size)))
"""
DEFAULTS = {"v": 0, "vmodule": (), "format": "glog", "suffix": ".log", "flush": 0.5, "skew": 0, "rank": (0, 1)}


@pytest.mark.parametrize(
    "env, warning, changed",
    [
        ({"DISTVLOG_V": "verbose"}, "DISTVLOG_V='verbose': not an integer (using 0)", {}),
        ({"DISTVLOG_V": "verbose", "GLOG_v": "2"}, "DISTVLOG_V='verbose': not an integer (using 2)", {"v": 2}),
        ({"GLOG_vmodule": "engine"}, "GLOG_vmodule='engine': 'engine' is not of the form name=level (using none)", {}),
        ({"DISTVLOG_FORMAT": "json"}, "DISTVLOG_FORMAT='json': not one of glog, jsonl (using 'glog')", {}),
        (
            {"DISTVLOG_FLUSH_INTERVAL": "soon"},
            "DISTVLOG_FLUSH_INTERVAL='soon': not a positive number of seconds (using 0.5)",
            {},
        ),
        (
            {"DISTVLOG_FLUSH_INTERVAL": "0"},
            "DISTVLOG_FLUSH_INTERVAL='0': not a positive number of seconds (using 0.5)",
            {},
        ),
        (
            {"DISTVLOG_SIMULATE_CLOCK_SKEW_US": "1ms"},
            "DISTVLOG_SIMULATE_CLOCK_SKEW_US='1ms': not an integer (using 0)",
            {},
        ),
        ({"RANK": "abc"}, "RANK='abc': not an integer (using rank 0 of 1)", {}),
        ({"RANK": "5", "WORLD_SIZE": "2"}, "RANK='5': not below WORLD_SIZE=2 (using rank 0 of 1)", {}),
        (
            {"PMI_RANK": "first", "RANK": "1", "WORLD_SIZE": "2"},
            "PMI_RANK='first': not an integer (using rank 1 of 2)",
            {"rank": (1, 2)},
        ),
    ],
)
def test_a_bad_value_is_named_once_and_the_default_used(scripts, env, warning, changed):
    run = scripts.run(SETTINGS, env=env)
    assert [line for line in run.proc.stderr.splitlines() if "ignoring" in line] == [f"distvlog: ignoring {warning}"]
    assert ast.literal_eval(run.proc.stdout) == {**DEFAULTS, **changed}
    assert [r.text for r in run.records()] == ["still logging"]


def test_commands_work_with_a_bad_value(scripts):
    scripts.run("import distvlog.logger as dlog; dlog.get_logger().warning('a record to merge')")
    proc = subprocess.run(
        [sys.executable, "-m", "distvlog", "merge", str(scripts.log_dir)],
        env=scripts.env({"DISTVLOG_V": "abc"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "a record to merge" in proc.stdout
    assert "ignoring" not in proc.stderr  # merge does not load the logger: the setting is not its to judge
