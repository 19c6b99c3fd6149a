"""The pipeline around the records: user processors run before rendering (structlog.DropEvent drops a
record), bind_context fields, loggers bound with initial values."""

from __future__ import annotations

import ast

from logger_testkit import read_jsonl

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
