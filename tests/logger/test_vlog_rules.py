"""VLOG rules: the global level and vmodule patterns from the environment, changed at run time, and
`vlog_guard` for one thread's region. In-process tests restore the rules they change (`fresh_rules`)."""

from __future__ import annotations

import re
import threading

import pytest

from distvlog.logger import get_logger, set_vlog_level, vlog_guard
from distvlog.logger._rules import Rules, _rules_from_env

MODULES = """
import distvlog.logger as dlog
import chatty, chatter
log = dlog.get_logger()
for level in range(5):
    log.vlog(level, f"main {level}")
    chatty.log.vlog(level, f"chatty {level}")
    chatter.log.vlog(level, f"chatter {level}")
log.debug("main debug")
"""


def _module(scripts, name: str) -> None:
    scripts.write("import distvlog.logger as dlog\nlog = dlog.get_logger()\n", name=f"{name}.py")


@pytest.mark.parametrize(
    "env",
    [
        {"DISTVLOG_V": "1", "DISTVLOG_VMODULE": "chatty=3,chat*=0"},
        {"GLOG_v": "1", "GLOG_vmodule": "chatty=3,chat*=0"},
        {"DISTVLOG_V": "1", "GLOG_v": "4", "DISTVLOG_VMODULE": "chatty=3,chat*=0", "GLOG_vmodule": "chatter=4"},
    ],
)
def test_levels_from_the_environment(scripts, env):
    """The global level and vmodule are read at start-up; the first matching pattern wins over the global
    level (in both directions); DISTVLOG_* wins over GLOG_*."""
    _module(scripts, "chatty")
    _module(scripts, "chatter")
    run = scripts.run(MODULES, env=env)
    assert [r.first for r in run.records()] == [
        "main 0 v=0",
        "chatty 0 v=0",
        "chatter 0 v=0",
        "main 1 v=1",
        "chatty 1 v=1",
        "chatty 2 v=2",
        "chatty 3 v=3",
        "main debug v=1",
    ]


def test_vmodule_names_the_main_script_by_its_file(scripts):
    """`python script.py` logs as module `script` (glog matches file basenames), not `__main__`."""
    _module(scripts, "chatty")
    _module(scripts, "chatter")
    run = scripts.run(MODULES, env={"DISTVLOG_VMODULE": "script=2"})
    assert [r.first for r in run.records()] == [
        "main 0 v=0",
        "chatty 0 v=0",
        "chatter 0 v=0",
        "main 1 v=1",
        "main 2 v=2",
        "main debug v=1",
    ]


README_EXAMPLE = """
import distvlog as dv

log = dv.get_logger(__name__)
for size in range(5):
    log.vlog(2, "batch", size=size)
"""


def test_get_logger_of_dunder_name_in_a_script_matches_its_file_name(scripts):
    """The README's example: `dv.get_logger(__name__)` in train.py with DISTVLOG_VMODULE=train=2 writes its
    vlog(2) records (the logger was named `__main__`, which no rule on file names matched)."""
    run = scripts.run(README_EXAMPLE, env={"DISTVLOG_VMODULE": "train=2"}, name="train.py")
    assert [r.first for r in run.records()] == [f"batch v=2 size={size}" for size in range(5)]


def test_nothing_verbose_by_default(scripts):
    _module(scripts, "chatty")
    _module(scripts, "chatter")
    run = scripts.run(MODULES)
    assert [r.first for r in run.records()] == ["main 0 v=0", "chatty 0 v=0", "chatter 0 v=0"]


def test_vmodule_matches_basenames_and_globs():
    rules = Rules(2).updated("engine=5,distvlog.nn.*=3,dist*=1,*_mpi=4")
    assert rules.level_for("distvlog.autograd.engine") == 5
    assert rules.level_for("engine") == 5
    assert rules.level_for("distvlog.distributed.distributed") == 1  # glob on the basename, overriding global 2
    assert rules.level_for("tests.gather_mpi") == 4
    assert rules.level_for("distvlog.nn.layers") == 3  # a dotted pattern matches the whole name
    assert rules.level_for("distvlog.autograd.engine2") == 2
    assert rules.level_for("myengine") == 2
    assert Rules(0).updated("eng*=3,engine=5").level_for("engine") == 3  # first match wins


def test_later_patterns_go_in_front():
    rules = Rules().updated("engine=5,eng*=1").updated({"eng*": 2})
    assert rules.patterns == (("eng*", 2), ("engine", 5))
    assert rules.level_for("engine") == 2  # the newer pattern is matched first
    assert rules.updated(3).level == 3 and rules.updated(3).patterns == rules.patterns


@pytest.mark.parametrize(
    "env, level, patterns",
    [
        ({}, 0, ()),
        ({"GLOG_v": "2"}, 2, ()),
        ({"DISTVLOG_V": "3", "GLOG_v": "2"}, 3, ()),
        ({"DISTVLOG_V": " 1 "}, 1, ()),
        ({"GLOG_vmodule": "a=1, b*=-1"}, 0, (("a", 1), ("b*", -1))),
        ({"DISTVLOG_VMODULE": "x=2", "GLOG_vmodule": "a=1"}, 0, (("x", 2),)),
    ],
)
def test_environment_parsing(monkeypatch, env, level, patterns):
    for var in ("DISTVLOG_V", "GLOG_v", "DISTVLOG_VMODULE", "GLOG_vmodule"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    rules = _rules_from_env()
    assert (rules.level, rules.patterns) == (level, patterns)


@pytest.mark.parametrize(
    "env, warning, level, patterns",
    [
        ({"DISTVLOG_V": "two"}, "DISTVLOG_V='two': not an integer (using 0)", 0, ()),
        ({"GLOG_v": "1.5"}, "GLOG_v='1.5': not an integer (using 0)", 0, ()),
        ({"DISTVLOG_V": "two", "GLOG_v": "3"}, "DISTVLOG_V='two': not an integer (using 3)", 3, ()),
        (
            {"DISTVLOG_VMODULE": "engine"},
            "DISTVLOG_VMODULE='engine': 'engine' is not of the form name=level (using none)",
            0,
            (),
        ),
        (
            {"GLOG_vmodule": "engine=5,dist=high"},
            "GLOG_vmodule='engine=5,dist=high': 'dist=high' is not of the form name=level (using none)",
            0,
            (),
        ),
        (
            {"DISTVLOG_VMODULE": "=3", "GLOG_vmodule": "a=1,b*=2"},
            "DISTVLOG_VMODULE='=3': '=3' is not of the form name=level (using a=1,b*=2)",
            0,
            (("a", 1), ("b*", 2)),
        ),
    ],
)
def test_bad_environment_values_are_named_and_skipped(monkeypatch, env_warnings, env, warning, level, patterns):
    for var in ("DISTVLOG_V", "GLOG_v", "DISTVLOG_VMODULE", "GLOG_vmodule"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    rules = _rules_from_env()
    assert env_warnings() == [f"distvlog: ignoring {warning}"]
    assert (rules.level, rules.patterns) == (level, patterns)


@pytest.mark.parametrize(
    "spec, error, message",
    [
        ("engine", ValueError, "'engine' is not of the form name=level"),
        (1.5, TypeError, "verbosity level must be an int, got float 1.5"),
        (True, TypeError, "verbosity level must be an int, got bool True"),
        (None, TypeError, "verbosity level must be an int, got NoneType None"),
        ({"engine": "5"}, TypeError, "vmodule level for 'engine' must be an int, got str '5'"),
        ({5: 5}, TypeError, "a vmodule pattern must be a module name or glob (a non-empty str), got 5"),
    ],
)
def test_bad_levels_at_run_time_change_nothing(fresh_rules, spec, error, message):
    set_vlog_level("keep=2")
    before = fresh_rules._process
    with pytest.raises(error, match=re.escape(message)):
        set_vlog_level(spec)
    with pytest.raises(error, match=re.escape(message)), vlog_guard(spec):
        pass
    assert fresh_rules._process is before and fresh_rules.ceiling == 2


def test_a_vlog_level_that_is_not_an_int_is_named(fresh_rules):
    with pytest.raises(TypeError, match=re.escape("vlog: the level must be an int, got str 'a'")):
        get_logger("tests.rules.train").vlog("a", "message")


def test_set_vlog_level_at_run_time(fresh_rules):
    log, engine = get_logger("tests.rules.train"), get_logger("distvlog.autograd.engine")
    assert not log.vlog_is_on(1)
    set_vlog_level(2)
    assert log.vlog_is_on(2) and not log.vlog_is_on(3) and engine.vlog_is_on(2)
    set_vlog_level({"engine": 5})
    assert engine.vlog_is_on(5) and not log.vlog_is_on(3)
    set_vlog_level("engine=0,train=4")
    assert not engine.vlog_is_on(1) and log.vlog_is_on(4)
    set_vlog_level(0)
    assert log.vlog_is_on(4) and not get_logger("tests.rules.other").vlog_is_on(1)  # vmodule stays
    assert fresh_rules.ceiling == 4


def test_vlog_guard_nests_and_restores_on_exception(fresh_rules):
    log, engine = get_logger("tests.rules.train"), get_logger("distvlog.autograd.engine")
    with vlog_guard(2):
        assert log.vlog_is_on(2) and engine.vlog_is_on(2) and not log.vlog_is_on(3)
        with pytest.raises(RuntimeError), vlog_guard({"engine": 6}):
            assert engine.vlog_is_on(6) and log.vlog_is_on(2) and not log.vlog_is_on(3)
            assert fresh_rules.ceiling == 6
            raise RuntimeError
        assert not engine.vlog_is_on(3) and engine.vlog_is_on(2)
        assert fresh_rules.ceiling == 2
    assert not log.vlog_is_on(1) and not engine.vlog_is_on(1)
    assert fresh_rules.ceiling == 0


def test_vlog_guard_is_per_thread(fresh_rules):
    log = get_logger("tests.rules.train")
    inside, checked = threading.Event(), threading.Event()
    seen = {}

    def guarded() -> None:
        with vlog_guard(3):
            seen["guarded thread"] = log.vlog_is_on(3)
            inside.set()
            checked.wait(30)

    thread = threading.Thread(target=guarded)
    thread.start()
    assert inside.wait(30)
    seen["other thread"] = log.vlog_is_on(1)
    seen["ceiling while open"] = fresh_rules.ceiling
    checked.set()
    thread.join()
    assert seen == {"guarded thread": True, "other thread": False, "ceiling while open": 3}
    assert fresh_rules.ceiling == 0


GUARDED = """
import threading
import distvlog.logger as dlog
log = dlog.get_logger()
with dlog.vlog_guard(2):
    log.vlog(2, "guarded")
    log.debug("guarded debug")
    t = threading.Thread(target=lambda: log.vlog(1, "other thread"))
    t.start()
    t.join()
log.vlog(1, "after")
log.debug("after debug")
dlog.set_vlog_level(1)
log.debug("debug at 1")
log.vlog(2, "vlog 2 at 1")
"""


def test_vlog_and_debug_records_follow_the_rules(scripts):
    run = scripts.run(GUARDED)
    assert [r.first for r in run.records()] == ["guarded v=2", "guarded debug v=1", "debug at 1 v=1"]
