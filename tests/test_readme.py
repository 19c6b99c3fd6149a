"""The README's commands, run as a new user runs them: in a fresh directory beside a checkout's `launch/`, in
the order shown, each `$ COMMAND` line through the shell, the Python files it shows (a block whose first line
is `# NAME.py`) written out first. Each output line the README shows must come out, once what
differs from run to run (times, pids, run ids, addresses, paths, floating-point values, digests) is set
aside; `...` stands for lines left out.

The commands of `docs/` are checked to be accepted as written (the tool's and the script's argument parsers);
what they print is tested where each tool is."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from distvlog.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
HANG_TIMEOUT_S = 300  # against hangs of a command only: never a limit on how fast anything must be
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
_VOLATILE = [
    (re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ ", re.M), "L "),
    (re.compile(r"(?:/[\w.+-]+)+/"), ""),  # a path's folders: the file's name stays
    (re.compile(r"\d{8}-\d{6}-[\w-]+"), "RUN"),
    (re.compile(r"0x[0-9a-f]+"), "0xH"),
    (re.compile(r"\b[0-9a-f]{16,}\b"), "H"),
    (re.compile(r"(?:pid|wait_us=|max@|loss) *[\d.][\d.kMG]*"), "N"),  # (a spread: `4.78k..14.1k`)
    (re.compile(r"\d+\.\d+(?:e[-+]\d+)?"), "F"),
    (re.compile(r"\(\d+ ms\)"), "(N ms)"),
]


def _steady(text: str) -> str:
    for pattern, stands_for in _VOLATILE:
        text = pattern.sub(stands_for, text)
    return text.strip()


def _blocks(path: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(path.read_text())]


def _session(readme: Path) -> tuple[dict[str, str], list[tuple[str, list[str]]]]:
    """The Python files the README shows, and its commands, each with the output lines shown after it."""
    files, commands = {}, []
    for lang, body in _blocks(readme):
        first = body.split("\n", 1)[0]
        if lang == "python" and re.fullmatch(r"# [\w-]+\.py", first):
            files[first[2:]] = body
        for line in body.splitlines() if lang == "" else ():
            if line.startswith("$ "):
                commands.append((line[2:], []))
            elif commands:
                commands[-1][1].append(line)
    return files, commands


def _main_job(readme: Path) -> list[str]:
    """The main job's output as the README shows it (the block after the two commands)."""
    return next(body for lang, body in _blocks(readme) if body.startswith("distvlog launch: 4 ranks")).splitlines()


def _shown(shown: list[str], out: str, command: str) -> None:
    """Each line shown is in the output (the ranks' lines in any order: they race)."""
    got = Counter(_steady(line) for line in out.splitlines())
    for line in shown:
        if line.strip() == "...":
            continue
        want = _steady(line)
        if got[want] == 0:
            pytest.fail(f"$ {command}\nshown in the README, not in its output:\n{line}\noutput:\n{out[-4000:]}")
        got[want] -= 1


def test_the_readme_runs_as_shown(tmp_path):
    readme = REPO / "README.md"
    files, commands = _session(readme)
    assert {"guard.py", "inplace.py"} <= files.keys() and len(commands) >= 15
    (tmp_path / "launch").symlink_to(REPO / "launch")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_", "FLAGS_"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(REPO))
    if shutil.which("torchrun", path=env["PATH"]) is None:  # (the PyTorch commands need `distvlog[torch]`)
        pytest.skip("torch is not installed: pip install torch==2.13.0, then pip install -e '.[test,torch]'")
    pytest.importorskip("sklearn", reason="the main job's output shown trains on scikit-learn's digits")

    def run(command: str) -> str:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # (in the order a terminal shows them)
            text=True,
            timeout=HANG_TIMEOUT_S,
        )
        return done.stdout

    _shown(_main_job(readme), run("distvlog launch -n 4 launch/train.py"), "the main job")
    for command, shown in commands:
        _shown(shown, run(command), command)


def _doc_commands() -> list[tuple[str, list[str]]]:
    found = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = re.sub(r"\\\n\s*", " ", doc.read_text())  # (a command continued on the next line)
        for line in re.findall(r"^ *\$ (.+)$", text, re.M):
            found.append((f"{doc.name}: {line}", _first_command(line)))
    return found


def _first_command(line: str) -> list[str]:
    """The words of a shell line's first command (up to a pipe, `;` or `&&`), quotes removed."""
    words = []
    for word in shlex.split(line, comments=True):
        if word in ("|", "&&", "||"):
            break
        words.append(word.rstrip(";"))
        if word.endswith(";"):
            break
    return words


# A launch/ script's `parse_args()` on the arguments shown, in a process of its own (the script imports
# torch and sets its threads' environment as it loads: none of it may leak into the tests' process).
_PARSE_ONLY = """
import importlib.util, sys
sys.path.insert(0, sys.argv[1])
spec = importlib.util.spec_from_file_location("doc_check", sys.argv[2])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)  # (its main() runs only as __main__)
sys.argv = sys.argv[2:]
module.parse_args()
"""


@pytest.mark.parametrize("where,argv", _doc_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_command_in_the_docs_is_accepted_as_written(where, argv, tmp_path):
    """`distvlog ...` lines parse with distvlog's own parser; a launch/ script's flags with the script's."""
    env_free = [a for a in argv if not re.fullmatch(r"[A-Z_]+=\S*", a)]
    program, args = env_free[0], env_free[1:]
    if program == "distvlog":
        try:
            build_parser().parse_args(args)
        except SystemExit as exc:
            pytest.fail(f"{where}: distvlog refuses it (exit {exc.code})")
    script = next((a for a in args if a.startswith("launch/") and a.endswith(".py")), None)
    if script is None:
        return
    assert (REPO / script).is_file(), where
    script_args = args[args.index(script) + 1 :]
    if script.endswith("train_torch.py"):
        pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, "-c", _PARSE_ONLY, str(REPO / "launch"), str(REPO / script), *script_args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT_S,
    )
    assert done.returncode == 0, f"{where}: {script} refuses its arguments: {done.stderr[-2000:]}"
