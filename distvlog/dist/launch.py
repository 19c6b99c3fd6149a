"""`distvlog launch -n N [--log-dir D] script.py [args]`: run a script on N MPI ranks, then merge its logs.

All ranks get one run id and log root through the environment (`-genv` for MPICH's Hydra and Intel MPI,
`-x` for Open MPI). The launcher is the one next to this Python (the `mpich` wheel's) before any on PATH.
Ranks run under `distvlog.dist.run`, so an exception in one aborts the job instead of hanging it. Whatever
happened, the run's files are merged into `timeline.log` and the command says where everything is and,
when a rank failed, which one and why.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import distvlog

from .._errors import InputError
from ..logger._rundir import log_dir
from . import report


def find_launcher(explicit: str | None) -> str:
    """The MPI launcher: `--mpirun`, else this Python's own, else the first on PATH."""
    if explicit:
        found = shutil.which(explicit)
        if found is None:
            raise InputError(f"--mpirun {explicit}: not found or not executable")
        return found
    bindir = Path(sys.executable).parent
    for name in ("mpirun", "mpiexec"):
        if os.access(bindir / name, os.X_OK):
            return str(bindir / name)
    for name in ("mpirun", "mpiexec"):
        found = shutil.which(name)
        if found:
            return found
    raise InputError("no MPI launcher found: pip install 'distvlog[mpich]', or put mpirun on PATH, or pass --mpirun")


def launcher_kind(launcher: str) -> str:
    """`openmpi`, `hydra` (MPICH, Intel MPI) or `other`, from `<launcher> --version`."""
    try:
        out = subprocess.run([launcher, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"{launcher} --version failed: {exc}") from None
    text = (out.stdout + out.stderr).lower()
    if "open mpi" in text or "open-mpi" in text or "openrte" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text or "intel(r) mpi" in text:
        return "hydra"
    return "other"


def mpi_command(launcher: str, kind: str, n: int, env: dict[str, str], hostfile: str | None) -> list[str]:
    """The launcher's own flags: rank count, hosts, the variables every rank must see."""
    cmd = [launcher, "-n", str(n)]
    if kind == "openmpi":
        if hostfile:
            cmd += ["--hostfile", hostfile]
        elif n > (os.cpu_count() or 1):
            cmd.append("--oversubscribe")
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        for key, value in env.items():
            cmd += ["-x", f"{key}={value}"]
    elif kind == "hydra":
        if hostfile:
            cmd += ["-f", hostfile]
        for key, value in env.items():
            cmd += ["-genv", key, value]
    elif hostfile:
        cmd += ["--hostfile", hostfile]
    return cmd


def _rank_env(run_id: str, root: Path, n: int, local: bool) -> dict[str, str]:
    """What every rank must see: the run, this very distvlog and, on one machine, a fair share of the
    cores for numpy's BLAS threads (unless OMP_NUM_THREADS says otherwise)."""
    source_root = str(Path(distvlog.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    env = {"DISTVLOG_RUN_ID": run_id, "DISTVLOG_LOG_DIR": str(root),
           "PYTHONPATH": source_root + (os.pathsep + path if path else "")}
    if local and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // n))
    return env


def run(args: argparse.Namespace) -> int:
    if args.n < 1:
        raise InputError(f"-n {args.n}: need at least one rank")
    script = Path(args.script)
    if not script.is_file():
        raise InputError(f"script {script}: no such file")
    if args.hostfile and not Path(args.hostfile).is_file():
        raise InputError(f"--hostfile {args.hostfile}: no such file")
    launcher = find_launcher(args.mpirun)
    kind = launcher_kind(launcher)
    root = Path(args.log_dir).resolve() if args.log_dir else log_dir().resolve()
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-launch{os.getpid()}"
    env = _rank_env(run_id, root, args.n, local=not args.hostfile)
    cmd = mpi_command(launcher, kind, args.n, env, args.hostfile)
    cmd += [sys.executable, "-m", "distvlog.dist.run", str(script), *args.script_args]
    print(f"distvlog launch: {args.n} ranks with {launcher} ({kind}), run {run_id} in {root}",
          file=sys.stderr, flush=True)
    code = _wait(subprocess.Popen(cmd, env={**os.environ, **env}))
    return report.after_run(root / run_id, args.n, code)


def _wait(proc: subprocess.Popen) -> int:
    """The launcher's exit code. On Ctrl-C the launcher got the same SIGINT and takes the ranks down: wait
    for it, so their logs are complete before the merge (a second Ctrl-C kills it)."""
    try:
        return proc.wait()
    except KeyboardInterrupt:
        print("distvlog launch: interrupted, waiting for the ranks to stop", file=sys.stderr, flush=True)
        try:
            return proc.wait()
        except KeyboardInterrupt:
            proc.kill()
            return proc.wait()


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "launch", help="run a script on N MPI ranks, then merge its logs into one timeline",
        description="Run SCRIPT on N MPI ranks with one run id, wait, merge the run's logs into timeline.log "
                    "in the run directory and say where the files are (and which rank failed, if one did).")
    p.add_argument("-n", "--np", dest="n", type=int, required=True, help="number of ranks")
    p.add_argument("--log-dir", help="log root (default: $DISTVLOG_LOG_DIR or ./distvlog_logs)")
    p.add_argument("--hostfile", help="hosts to run on (passed to the launcher as -f / --hostfile)")
    p.add_argument("--mpirun", help="the MPI launcher (default: the one next to this Python, else PATH's)")
    p.add_argument("script", help="the Python script every rank runs")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    p.set_defaults(run=run)
