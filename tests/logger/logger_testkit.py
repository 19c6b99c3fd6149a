"""Helpers for the logger's tests: run a script in a fresh process with its own log directory, and read
the rank files it wrote strictly (every line inside a whole record, nothing left over).

Most of the logger is per-process state (rank, the open file, signal handlers, exit hooks), so nearly
every test runs its code in a subprocess. Timeouts only guard against hangs; nothing here times speed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distvlog.format import END_RECORD, OWN_FILE, OWN_LINE

REPO = Path(__file__).resolve().parents[2]
HANG_TIMEOUT_S = 120
# The glog prefix, exactly (issue 3), and the same with its parts captured.
GLOG_PREFIX = re.compile(r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{6} \d+ [^:]+:\d+\] \[rank \d+\] ")
GLOG_RECORD = re.compile(
    r"^(?P<severity>[IWEF])(?P<mmdd>\d{4}) (?P<hms>\d{2}:\d{2}:\d{2})\.(?P<us>\d{6}) "
    r"(?P<tid>\d+) (?P<file>[^:]+):(?P<line>\d+)\] \[rank (?P<rank>\d+)\] (?P<first>.*)$"
)
HEADER = (
    re.compile(r"^Log file created at: \d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}$"),
    re.compile(r"^Running on machine: \S+$"),
    re.compile(r"^Log line format: \[IWEF\]mmdd hh:mm:ss\.uuuuuu threadid file:line\] msg$"),
)
META_PREFIX = "distvlog-meta "
COUNT = re.compile(r" \+lines=([0-9]+)$")  # a multi-line record's count of its continuation lines
# Variables that would make a test process think it is some launcher's rank, or change the logger's setup.
_FOREIGN_ENV = ("DISTVLOG_", "GLOG_", "OMPI_", "PMI_", "PMIX_", "SLURM_", "TORCHELASTIC_")
_FOREIGN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass
class Record:
    """One glog record: the prefix's parts, the first line of the message (fields included, the count of
    continuation lines not) and the continuation lines."""

    severity: str
    mmdd: str
    hms: str
    us: str
    tid: int
    file: str
    line: int
    rank: int
    first: str
    more: list[str] = field(default_factory=list)
    lineno: int = 0  # 0-based line of the file where the record starts

    @property
    def text(self) -> str:
        return "\n".join([self.first, *self.more])


@dataclass
class GlogFile:
    header: list[str]
    meta: dict[str, Any]
    records: list[Record]  # the meta record and the end record excluded
    ended: bool  # whether the file has END_RECORD (the script ended: the logger's exit hook wrote it)


def read_glog(path: Path) -> GlogFile:
    """Parse a glog rank file strictly: glog's three header lines, the meta record, then records whose
    continuation lines follow them, as many as each declares (`first` is without the count); the file ends
    with a newline (no torn record), or in the reserve of a process killed before it settled its file."""
    data = without_reserve(path.read_bytes())
    assert data.endswith(b"\n"), f"{path} ends inside a record: {data[-200:]!r}"
    lines = data.decode("utf-8").split("\n")[:-1]
    for pattern, line in zip(HEADER, lines[:3]):
        assert pattern.match(line), f"header line {line!r} of {path}"
    records: list[Record] = []
    for number, line in enumerate(lines[3:], start=3):
        match = GLOG_RECORD.match(line)
        if match:
            assert GLOG_PREFIX.match(line)
            g = match.groupdict()
            records.append(
                Record(
                    g["severity"],
                    g["mmdd"],
                    g["hms"],
                    g["us"],
                    int(g["tid"]),
                    g["file"],
                    int(g["line"]),
                    int(g["rank"]),
                    g["first"],
                    lineno=number,
                )
            )
        else:
            assert records, f"line {number} of {path} is outside any record: {line!r}"
            records[-1].more.append(line)
    for rec in records:  # the count ends the first line exactly when continuation lines follow, and says how many
        declared = COUNT.search(rec.first)
        assert len(rec.more) == (int(declared.group(1)) if declared else 0), f"line {rec.lineno} of {path}: {rec}"
        rec.first = rec.first[: declared.start()] if declared else rec.first
    assert records and records[0].first.startswith(META_PREFIX), f"{path} has no meta record"
    meta = json.loads(records[0].first[len(META_PREFIX) :])
    kept = [r for r in records[1:] if (r.file, r.line, r.first) != (OWN_FILE, OWN_LINE, END_RECORD)]
    assert len(records) - 1 - len(kept) <= 1, f"{path}: more than one end record"
    return GlogFile(lines[:3], meta, kept, len(kept) < len(records) - 1)


def without_reserve(data: bytes) -> bytes:
    """The file without the reserve a killed process leaves at its end (the format's RESERVE: NUL bytes)
    and with no NUL anywhere else."""
    data = data.rstrip(b"\0")
    assert b"\0" not in data, f"NUL bytes inside the content: {data[-200:]!r}"
    return data


def read_jsonl(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(meta, records) of a JSON-lines rank file; every line must be one whole JSON object."""
    data = without_reserve(path.read_bytes())
    assert data.endswith(b"\n"), f"{path} ends inside a record"
    objs = [json.loads(line) for line in data.decode("utf-8").split("\n")[:-1]]
    assert objs[0]["event"] == "distvlog-meta"
    return objs[0]["meta"], [o for o in objs[1:] if (o["event"], o["file"]) != (END_RECORD, OWN_FILE)]


def line_of(code: str, marker: str) -> int:
    """The 1-based line of `code` (as Scripts writes it) that ends with `# @marker`."""
    lines = textwrap.dedent(code).strip("\n").splitlines()
    found = [i for i, line in enumerate(lines, start=1) if line.rstrip().endswith(f"# @{marker}")]
    assert len(found) == 1, f"marker {marker!r} found {len(found)} times"
    return found[0]


def clean_env(log_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV) and k not in _FOREIGN_VARS}
    env.update(PYTHONPATH=str(REPO), DISTVLOG_LOG_DIR=str(log_dir), PYTHONUNBUFFERED="1")
    env.update(extra or {})
    return env


class LogDir:
    """The rank files a script wrote under `log_dir`."""

    log_dir: Path

    def files(self, pattern: str = "rank-*") -> list[Path]:
        """The rank files in the run directories (not through the `latest` link)."""
        return sorted(p for p in self.log_dir.glob(f"*/{pattern}") if p.parent.name != "latest")

    def only_file(self) -> Path:
        files = self.files()
        assert len(files) == 1, f"expected one rank file, found {files}"
        return files[0]

    def glog(self) -> GlogFile:
        return read_glog(self.only_file())

    def records(self) -> list[Record]:
        return self.glog().records


@dataclass
class Run(LogDir):
    """A finished script: its process result and the log root it wrote to."""

    proc: subprocess.CompletedProcess
    log_dir: Path


class Scripts(LogDir):
    """Writes test scripts into a temporary directory and runs them there, each in a fresh process; what
    they logged is under `log_dir` (`files()`, `records()`, ...)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.log_dir = tmp / "logs"

    def write(self, code: str, name: str = "script.py") -> Path:
        path = self.tmp / name
        path.write_text(textwrap.dedent(code).strip("\n") + "\n")
        return path

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return clean_env(self.log_dir, extra)

    def run(
        self,
        code: str,
        env: dict[str, str] | None = None,
        *,
        rc: int | None = 0,
        name: str = "script.py",
        timeout: float = HANG_TIMEOUT_S,
    ) -> Run:
        """Run `code` as `name` to completion; `rc` is the expected return code (None: any)."""
        script = self.write(code, name)
        proc = subprocess.run(
            [sys.executable, str(script)],
            env=self.env(env),
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if rc is not None:
            assert proc.returncode == rc, f"rc {proc.returncode} != {rc}\n{proc.stdout}\n{proc.stderr}"
        return Run(proc, self.log_dir)

    def start(self, code: str, env: dict[str, str] | None = None, *, name: str = "script.py") -> subprocess.Popen:
        """Start `code` as `name`; its stdout is a text pipe (see wait_for_line)."""
        script = self.write(code, name)
        return subprocess.Popen(
            [sys.executable, str(script)],
            env=self.env(env),
            cwd=self.tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def wait_for_line(proc: subprocess.Popen, prefix: str) -> str:
    """The first stdout line of `proc` starting with `prefix` (the script's "I got this far" marker)."""
    for line in proc.stdout:
        if line.startswith(prefix):
            return line.strip()
    proc.wait(timeout=HANG_TIMEOUT_S)
    raise AssertionError(f"{proc.args} ended (rc {proc.returncode}) before printing {prefix!r}: {proc.stderr.read()}")


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    """Wait for a started script (killing it if it hangs); (returncode, rest of stdout, stderr)."""
    try:
        out, err = proc.communicate(timeout=HANG_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"{proc.args} hung\n{out}\n{err}") from None
    return proc.returncode, out, err


def wait_until(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    """Poll `predicate` until it holds; only a generous bound against hangs, never a speed limit."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
