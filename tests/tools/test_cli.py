"""The `distvlog` command as a new user meets it: bare, `--version`, every `--help`; and it imports only what
its command uses: a small merge needs neither pyarrow (~0.13 s to import) nor the autograd engine, the logger
or MPI. (Its wall time is measured in benchmarks/bench_start.py beside `python -c pass`; tests assert what is
imported, not how long it takes.)"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tools_logfiles import ROOT

from distvlog.cli import COMMANDS, build_parser

HEAVY = (
    "pyarrow",
    "distvlog.autograd",
    "distvlog.nn",
    "distvlog.logger",
    "structlog",
    "mpi4py",
    "distvlog.distributed",
)

PROBE = """
import json, sys
from distvlog.cli import main
code = main(sys.argv[1:])
print(json.dumps([code, sorted(sys.modules)]))
"""


def modules_after(*args) -> tuple[int, set[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *map(str, args)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=120,
        check=True,
    )
    code, modules = json.loads(proc.stdout.splitlines()[-1])
    return code, set(modules)


def loaded(modules: set[str], prefix: str) -> bool:
    return any(m == prefix or m.startswith(prefix + ".") for m in modules)


def test_a_small_merge_imports_nothing_it_does_not_use(glog_run):
    """4 ranks of a few hundred records: no pyarrow, engine, logger, MPI, nor another command's module; no
    read-ahead threads (concurrent.futures, which imports logging) nor the follow mode."""
    code, modules = modules_after("merge", glog_run, "-o", os.devnull)
    assert code == 0 and "distvlog.tools.merge" in modules
    assert [m for m in HEAVY if loaded(modules, m)] == []
    unused = ("concurrent.futures", "logging", "distvlog.tools.merge._follow", "socket", "tempfile")
    assert [m for m in unused if loaded(modules, m)] == []
    assert not loaded(modules, "distvlog.tools.trace") and not loaded(modules, "distvlog.launch")


def test_importing_distvlog_imports_no_submodule_until_a_name_is_used():
    """`import distvlog` is cheap; Paddle's names, subpackages and the dtype names load on first use."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, distvlog as dv; before = sorted(m for m in sys.modules if m.startswith('distvlog.'));"
            "x = dv.to_tensor([1.0, 2.0]); dv.nn.Linear; print(before, type(x).__name__, dv.float32.__name__)",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=120,
        check=True,
    )
    assert proc.stdout.split() == ["[]", "Tensor", "float32"]


def test_the_top_level_help_lists_every_command_with_its_help():
    """Without a command every command's module is imported, so `distvlog --help` says what each one does."""
    text = build_parser().format_help()
    assert all(f"    {name}  " in text for name in COMMANDS) and "merge per-rank logs into one timeline" in text


def distvlog_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from distvlog.cli import command; sys.exit(command())", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=120,
    )


BLAS_PROBE = """
import os, sys, time
from distvlog.cli import command
code = command()
for _ in range(200):  # a joined thread's OS thread may take a moment to exit (on a busy machine)
    if len(os.listdir("/proc/self/task")) == 1:
        break
    time.sleep(0.01)
print(code, os.environ.get("OPENBLAS_NUM_THREADS"), len(os.listdir("/proc/self/task")))
"""


def test_the_tools_run_numpys_blas_on_one_thread_unless_the_user_chose(glog_run):
    """`distvlog merge` starts no BLAS worker thread (it would spin as numpy loads); a user's own
    OPENBLAS_NUM_THREADS is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    runs = [
        subprocess.run(
            [sys.executable, "-c", BLAS_PROBE, "merge", glog_run, "-o", os.devnull],
            capture_output=True,
            text=True,
            env=dict(env, PYTHONPATH=str(ROOT), **chosen),
            timeout=120,
            check=True,
        ).stdout.split()
        for chosen in ({}, {"OPENBLAS_NUM_THREADS": "2"})
    ]
    assert runs[0] == ["0", "1", "1"]  # exit code, the variable, the process's threads (its own only)
    assert runs[1][:2] == ["0", "2"]


def test_bare_distvlog_lists_its_commands_and_succeeds():
    """`distvlog` alone is a question, not a mistake: the commands with what each does, exit 0."""
    proc = distvlog_command()
    assert proc.returncode == 0 and proc.stderr == ""
    assert all(f"    {name}  " in proc.stdout for name in COMMANDS) and "COMMAND --help" in proc.stdout


def test_version_is_the_installed_distributions():
    """`distvlog --version` prints the version pip knows (one source: distvlog.__version__)."""
    proc = distvlog_command("--version")
    assert proc.returncode == 0 and proc.stdout.split() == ["distvlog", importlib.metadata.version("distvlog")]


def test_diffs_help_says_its_exit_codes():
    """A script or CI step that runs `distvlog diff` branches on its exit code: --help says what each means."""
    proc = distvlog_command("diff", "--help")
    assert "exit status: 0 when no error is found, 1 when one is, 2 on unusable input" in " ".join(proc.stdout.split())


def test_every_commands_help_is_whole():
    """Each command's --help ends with its options, and its description is not cut mid-sentence."""
    for name in COMMANDS:
        proc = distvlog_command(name, "--help")
        assert proc.returncode == 0, name
        description = proc.stdout.split("\n\n")[1]
        assert description.rstrip().endswith((".", ")")), (name, description)
        assert proc.stdout.rstrip().splitlines()[-1].strip(), name


GUARDED = """
import distvlog as dv
x = dv.randn([4, 3], dtype="float32")
x.stop_gradient = False
with dv.backward_vlog_guard(5):
    y = (x * x).sum()
y.backward()
"""


@pytest.fixture(scope="module")
def guarded_run(tmp_path_factory) -> Path:
    """A one-process run with gradient statistics (what diff, trace and watch read)."""
    logs = tmp_path_factory.mktemp("guarded")
    env = dict(os.environ, DISTVLOG_LOG_DIR=str(logs), DISTVLOG_RUN_ID="run", PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", GUARDED], env=env, check=True, capture_output=True, timeout=120)
    return logs / "run"


@pytest.mark.parametrize("stdout", ["closed", "full"])
@pytest.mark.parametrize("tool", ["merge", "diff", "trace"])
def test_a_closed_or_full_stdout_is_one_line_never_a_traceback(guarded_run, tool, stdout):
    """`distvlog TOOL RUN >&-` and `> /dev/full`: exit 2 and one line naming what could not be written."""
    args = ["-o", "-"] if tool == "trace" else []
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "distvlog", tool, str(guarded_run), *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            preexec_fn=(lambda: os.close(1)) if stdout == "closed" else None,
            timeout=120,
        )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(f"distvlog {tool}: error: cannot write "), proc.stderr
