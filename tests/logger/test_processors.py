"""The pipeline around the records: user processors run before rendering (structlog.DropEvent drops a
record), bind_context fields, loggers bound with initial values."""

from __future__ import annotations

import ast
import shutil

from logger_testkit import REPO, line_of, read_jsonl

PROCESSORS = """
import threading
import structlog
import distvlog.logger as dlog
seen = []
def shout(logger, method, ed):
    seen.append((method, ed["file"], ed["line"] > 0, ed["severity"]))  # our fields are already there
    ed["event"] = ed["event"].upper()
    ed["tag"] = "t1"
    return ed
def drop_secrets(logger, method, ed):
    if ed.get("secret"):
        raise structlog.DropEvent
    return ed
dlog.add_processor(shout)
dlog.add_processor(drop_secrets)
log = dlog.get_logger()
log.info("hello", step=1)
log.info("password", secret=True)
log.warning("careful")
dlog.set_vlog_level(1)
log.debug("debug secret", secret=True)
log.debug("debug ok")
dlog.bind_context(step=7, note="a b")
log.info("context")
log.info("explicit", step=8)
t = threading.Thread(target=lambda: log.info("other thread"))
t.start()
t.join()
dlog.unbind_context("step")
log.info("unbound")
dlog.get_logger("x", job="j1").info("bound")
print(seen)
"""


def test_user_processors_and_context(scripts):
    run = scripts.run(PROCESSORS)
    assert [r.first for r in run.records()] == [
        "HELLO step=1 tag=t1",
        "CAREFUL tag=t1",
        "DEBUG OK v=1 tag=t1",
        'CONTEXT step=7 note="a b" tag=t1',
        'EXPLICIT step=8 note="a b" tag=t1',  # the call's own field wins
        "OTHER THREAD tag=t1",  # a new thread starts without the main thread's context
        'UNBOUND note="a b" tag=t1',
        'BOUND job=j1 note="a b" tag=t1',
    ]
    seen = ast.literal_eval(run.proc.stdout)
    assert seen[:5] == [
        ("info", "script.py", True, "I"),
        ("info", "script.py", True, "I"),
        ("warning", "script.py", True, "W"),
        ("vlog", "script.py", True, "I"),
        ("vlog", "script.py", True, "I"),
    ]


def test_user_processors_run_before_the_json_renderer(scripts):
    run = scripts.run(PROCESSORS, env={"DISTVLOG_FORMAT": "jsonl"})
    _, records = read_jsonl(run.only_file())
    assert [(r["event"], r["tag"]) for r in records][:3] == [("HELLO", "t1"), ("CAREFUL", "t1"), ("DEBUG OK", "t1")]
    assert not any(r.get("secret") for r in records)


def test_a_lone_file_or_line_field_gives_way_to_the_call_site(scripts):
    code = (
        "import distvlog.logger as dlog\nlog = dlog.get_logger()\nlog.info('a', file='f.py')\nlog.info('b', line=9)\n"
    )
    run = scripts.run(code)
    assert [(r.first, r.file, r.line) for r in run.records()] == [("a", "script.py", 3), ("b", "script.py", 4)]


def test_a_call_site_override_of_the_wrong_type_gives_way_to_the_call_site(scripts):
    """A `ts`, `file` or `line` the glog prefix could not hold (format section 4) is replaced, never written."""
    code = (
        "import distvlog.logger as dlog\nlog = dlog.get_logger()\n"
        "log.info('a', file='f.py', line='12] forged')\nlog.info('b', file=3, line=4)\nlog.info('c', ts='now')\n"
    )
    run = scripts.run(code)
    assert [(r.first, r.file, r.line) for r in run.records()] == [
        ("a", "script.py", 3),
        ("b", "script.py", 4),
        ("c", "script.py", 5),
    ]


LAYERS = """
def add(a, b):
    return a + b  # @promote


def fail():
    raise ValueError("failed in a sibling folder")  # @raise
"""
TRAIN = """
import distvlog as dv
from distvlog_examples.layers import add, fail
add(dv.ones([2], dtype="float32"), dv.ones([2], dtype="float64"))
fail()
"""


def test_a_module_in_a_folder_named_like_the_package_is_the_users(scripts, tmp_path):
    """`distvlog_examples/` beside `distvlog/` holds the user's code: the type-promotion warning and the
    failure record point at its lines, not at its caller's (the package's directory is compared with its
    trailing separator)."""
    shutil.copytree(REPO / "distvlog", tmp_path / "distvlog", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "distvlog_examples").mkdir()
    scripts.write(LAYERS, "distvlog_examples/layers.py")
    run = scripts.run(TRAIN, env={"PYTHONPATH": str(tmp_path)}, rc=1)
    assert [(r.severity, r.file, r.line) for r in run.records()] == [
        ("W", "layers.py", line_of(LAYERS, "promote")),
        ("F", "layers.py", line_of(LAYERS, "raise")),
    ]
