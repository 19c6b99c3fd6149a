"""`distvlog launch -n N [--log-dir D] script.py [args]`: run a script on N MPI ranks, then merge its logs.

All ranks get one run id and log root through the environment (`-genv` for MPICH's Hydra and Intel MPI,
`-x` for Open MPI). The launcher is the one next to this Python (the `mpich` wheel's) before any on PATH.
If this Python's mpi4py would load another MPI's libmpi than the launcher's (the mpich wheel's under a system
Open MPI's mpirun), the ranks get MPI4PY_LIBMPI pointing at the launcher's own, or the command says why not.
Each rank runs under `distvlog.launch.supervise` (its parent) and `distvlog.launch.run` (the script's
runner), so an exception in one aborts the job instead of hanging it. Whatever
happened, the run's files are merged into `timeline.log` and the command says where everything is and,
when a rank failed, which one and why. With `--follow` the merged timeline is shown live while the job runs
(`distvlog merge --follow`), and the ranks' own output goes to a file in the run directory instead.
Ctrl-C, SIGTERM, `--timeout` and `--idle-timeout` stop a job so that each rank says where it was (`stop`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path

import distvlog

from ..distributed.comm import library_name
from ..errors import InputError
from ..logger import SETTINGS_SAID, log_dir
from . import report, stop

# The libmpi soname of each launcher kind's MPI, and the MPI's name in messages.
_LIBMPI = {"openmpi": ("libmpi.so.40", "Open MPI"), "hydra": ("libmpi.so.12", "MPICH")}
# Asks mpi4py which MPI library it loads, without initialising MPI.
OUTPUT_NAME = "output.txt"  # with --follow, in the run directory: what the ranks print
_PROBE = "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; print(MPI.Get_library_version())"


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
    return kind_of(out.stdout + out.stderr)


def kind_of(text: str) -> str:
    """The MPI family a launcher's `--version` or a library's version text names."""
    text = text.lower()
    if "open mpi" in text or "open-mpi" in text or "openrte" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text or "intel(r) mpi" in text:
        return "hydra"
    return "other"


def _mpi4py_library(env: dict[str, str]) -> str:
    """What this Python's mpi4py loads with `env`: the library's name, or why it loads none."""
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no MPI library ({exc})"
    if out.returncode != 0 or not out.stdout.strip():
        return f"no MPI library ({(out.stderr.strip().splitlines() or ['no output'])[-1]})"
    return library_name(out.stdout)


def launcher_libmpi(launcher: str, kind: str) -> str | None:
    """The launcher's own libmpi: <prefix>/lib, lib64 or Debian's lib/<multiarch>, next to its bin/."""
    soname = _LIBMPI[kind][0]
    prefix = Path(launcher).resolve().parents[1]
    for libdir in ("lib", "lib64", f"lib/{sysconfig.get_config_var('MULTIARCH') or ''}"):
        if (prefix / libdir / soname).is_file():
            return str(prefix / libdir / soname)
    return None


def matching_libmpi(launcher: str, kind: str) -> dict[str, str]:
    """{} if this Python's mpi4py loads the launcher's MPI, else MPI4PY_LIBMPI for the launcher's own libmpi.
    Mismatched, every rank would find a COMM_WORLD of its own (or die in MPI_Init); a user's own
    MPI4PY_LIBMPI is never overridden."""
    if kind not in _LIBMPI:
        return {}
    loaded = _mpi4py_library(dict(os.environ))
    if kind_of(loaded) == kind:
        return {}
    own = os.environ.get("MPI4PY_LIBMPI")
    lib = None if own else launcher_libmpi(launcher, kind)
    if lib and kind_of(_mpi4py_library({**os.environ, "MPI4PY_LIBMPI": lib})) == kind:
        return {"MPI4PY_LIBMPI": lib}
    soname, name = _LIBMPI[kind]
    raise InputError(
        f"{launcher} is {name}'s launcher, but mpi4py loads {loaded}"
        f"{f' (MPI4PY_LIBMPI={own})' if own else ''}: pass --mpirun with the launcher of that MPI, "
        f"or set MPI4PY_LIBMPI to {name}'s {soname}"
    )


def mpi_command(launcher: str, kind: str, n: int, env: dict[str, str], hostfile: str | None) -> list[str]:
    """The launcher's own flags: rank count, hosts, the variables every rank must see."""
    cmd = [launcher, "-n", str(n)]
    if kind == "openmpi":
        if hostfile:
            cmd += ["--hostfile", hostfile]
        else:  # Open MPI counts cores, not hardware threads: 8 ranks on 4 hyperthreaded cores need it too
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
    env = {
        "DISTVLOG_RUN_ID": run_id,
        "DISTVLOG_LOG_DIR": str(root),
        "PYTHONPATH": source_root + (os.pathsep + path if path else ""),
        SETTINGS_SAID: "1",  # (importing the logger, this process has named any bad DISTVLOG_ setting)
    }
    if local and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // n))
    return env


def run(args: argparse.Namespace) -> int:
    if args.n < 1:
        raise InputError(f"-n {args.n}: need at least one rank")
    if args.watch and args.follow:
        raise InputError("--watch and --follow: choose one (both take the terminal)")
    for option, given in (("--stop-on-error", args.stop_on_error), ("--hang-after", args.hang_after is not None)):
        if given and not args.watch:
            raise InputError(f"{option}: needs --watch")
    script = Path(args.script)
    if not script.is_file():
        raise InputError(f"script {script}: {'a directory' if script.is_dir() else 'no such file'}")
    if args.hostfile and not Path(args.hostfile).is_file():
        raise InputError(f"--hostfile {args.hostfile}: no such file")
    launcher = find_launcher(args.mpirun)
    kind = launcher_kind(launcher)
    root = Path(args.log_dir).resolve() if args.log_dir else log_dir().resolve()
    _check_writable(root, args.log_dir)
    run_id = f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-launch{os.getpid()}"  # UTC, as every run id
    libmpi = matching_libmpi(launcher, kind)
    env = {**_rank_env(run_id, root, args.n, local=not args.hostfile), **libmpi}
    cmd = mpi_command(launcher, kind, args.n, env, args.hostfile)
    cmd += [sys.executable, "-m", "distvlog.launch.supervise", str(script), *args.script_args]
    note = f", MPI4PY_LIBMPI={libmpi['MPI4PY_LIBMPI']}" if libmpi else ""
    print(
        f"distvlog launch: {args.n} ranks with {launcher} ({kind}{note}), run {run_id} in {root}",
        file=sys.stderr,
        flush=True,
    )
    started = time.time()
    run_dir = root / run_id
    if not (args.follow or args.watch):
        proc = subprocess.Popen(cmd, env={**os.environ, **env}, **stop.LAUNCHER_SESSION)
        code, stopped = _wait(proc, run_dir, args)
        return _status(stopped, report.after_run(run_dir, args.n, code, started))
    run_dir.mkdir(parents=True, exist_ok=True)
    output = run_dir / OUTPUT_NAME
    print(f"distvlog launch: the ranks' stdout and stderr go to {output}", file=sys.stderr, flush=True)
    with open(output, "wb") as out:
        proc = subprocess.Popen(
            cmd, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT, **stop.LAUNCHER_SESSION
        )
    code, stopped = _wait(
        proc,
        run_dir,
        args,
        lambda stopper: _watch(run_dir, proc, args, stopper) if args.watch else _follow(run_dir, proc),
    )
    print(f"distvlog launch: the ranks' output: {output}", file=sys.stderr, flush=True)
    return _status(stopped, report.after_run(run_dir, args.n, code, started))


def _status(stopped: int | None, reported: int) -> int:
    """The exit status: the stop's (see `stop`) if the job was stopped, else what the report found."""
    return reported if stopped is None else stopped


def _follow(run_dir: Path, proc: subprocess.Popen) -> None:
    """`distvlog merge --follow RUN_DIR` until the job has exited (whatever the ranks' logs say)."""
    from ..cli import build_parser
    from ..tools.merge import follow

    args = build_parser().parse_args(["merge", "--follow", str(run_dir), "--idle", "inf"])
    follow(args, stop=lambda: proc.poll() is not None)


def _watch(run_dir: Path, proc: subprocess.Popen, args: argparse.Namespace, stopper: stop.Stopper) -> None:
    """`distvlog watch RUN_DIR` until the job has exited; --stop-on-error stops it through the launcher, and
    `launch` then exits 1, as `diff` does for an error."""
    from ..tools.watch import watch

    watch(
        run_dir,
        stop_on_error=args.stop_on_error,
        hang_after=args.hang_after,
        launcher_stop=lambda: stopper.stop(1),
        job_ended=lambda: proc.poll() is not None,
    )


def _check_writable(root: Path, given: str | None) -> None:
    """Refuse a log root the ranks could not write before the job runs (each would log to stderr instead)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        reason = None if os.access(root, os.W_OK | os.X_OK) else "not writable"
    except FileExistsError:
        reason = "not a directory"
    except OSError as exc:
        reason = exc.strerror or str(exc)
    if reason:
        raise InputError(f"{'--log-dir ' + given if given else 'log directory ' + str(root)}: {reason}")


def _wait(
    proc: subprocess.Popen,
    run_dir: Path,
    args: argparse.Namespace,
    watch: Callable[[stop.Stopper], None] | None = None,
) -> tuple[int, int | None]:
    """The launcher's exit code (128+N after signal N), after `watch(stopper)` (which returns once the job exited),
    and the exit status the job's stop calls for (None if nothing stopped it): a signal or a timeout stops
    the ranks, and we wait for them, so that their logs are complete before the merge."""
    with stop.Stopper(proc, run_dir, args.timeout, args.idle_timeout) as stopper:
        if watch is not None:
            watch(stopper)
        code = proc.wait()
    return (128 - code if code < 0 else code), stopper.status


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "launch",
        help="run a script on N MPI ranks, then merge its logs into one timeline",
        description="Run SCRIPT on N MPI ranks with one run id, wait, merge the run's logs into timeline.log "
        "in the run directory and say where the files are (and which rank failed, if one did).",
    )
    p.add_argument("-n", "--np", dest="n", type=int, required=True, help="number of ranks")
    p.add_argument("--log-dir", help="log root (default: $DISTVLOG_LOG_DIR or ./distvlog_logs)")
    p.add_argument("--hostfile", help="hosts to run on (passed to the launcher as -f / --hostfile)")
    p.add_argument("--mpirun", help="the MPI launcher (default: the one next to this Python, else PATH's)")
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help=f"show the merged timeline live while the job runs; the ranks' own output goes to {OUTPUT_NAME} "
        "in the run directory",
    )
    p.add_argument(
        "--timeout",
        metavar="S",
        type=stop.seconds_argument,
        help="stop the job after S seconds, each rank saying where it was (exit status 124)",
    )
    p.add_argument(
        "--idle-timeout",
        metavar="S",
        type=stop.seconds_argument,
        help="stop the job once no rank wrote to its log for S seconds (a hang), as --timeout does",
    )
    p.add_argument(
        "--watch",
        action="store_true",
        help=f"print diff's verdicts live while the job runs (`distvlog watch`); the ranks' own output goes to "
        f"{OUTPUT_NAME} in the run directory",
    )
    from ..tools.watch import add_arguments as add_watch_arguments

    add_watch_arguments(p)
    p.add_argument("script", help="the Python script every rank runs")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    p.set_defaults(run=run)
