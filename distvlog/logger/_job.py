"""Which job this process is a rank of, from what its launcher gives every rank of that job alike.

No rank reads a clock or a time zone here: a job is named by what its launcher handed to all of its ranks,
on every host. In the order tried (the innermost launcher first: torchrun started by srun is torchrun's):
- torchrun: its rendezvous id when given (`--rdzv-id`), else the endpoint of the store all agents share
  (MASTER_ADDR:MASTER_PORT), and the restart count. The store itself also gives the run id (`agreed`).
- Open MPI and other PMIx launchers: the PMIx namespace (`prterun-<host>-<pid>@1`, `slurm.pmix.<job>.<step>`).
- MPICH's Hydra (and Intel MPI's): the control endpoint every `hydra_pmi_proxy` of the job was started with
  (`--control-port host:port` on its command line, the `mpiexec` that serves the job's PMI key-value space)
  and the process group. The PMI connection itself is not asked: Hydra takes a rank that spoke PMI and then
  exits without PMI's finalize for a failed MPI process and kills the job, and a script that only logs never
  finalizes.
- SLURM: the job and step ids.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

STORE_TIMEOUT_S = 10  # the store runs in torchrun's agent, up before any worker starts: a connection is quick
_STORE_KEY = "distvlog/run_id"


def tag() -> str | None:
    """A short name every rank of this job derives alike (`hydra-1a2b3c4d`, `slurm-812.0`), None when no
    launcher this module knows started the process."""
    env = os.environ
    if env.get("TORCHELASTIC_RUN_ID"):
        return _hashed("torchrun", _torchrun_key())
    for var in ("PMIX_NAMESPACE", "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_ess_base_jobid"):
        if env.get(var):
            return _hashed("pmix" if var == "PMIX_NAMESPACE" else "ompi", env[var])
    if env.get("PMI_RANK"):
        control = _hydra_control()
        if control:
            return _hashed("hydra", control)
    if env.get("SLURM_JOB_ID"):
        step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or "batch"
        return f"slurm-{env['SLURM_JOB_ID']}.{step}"
    return None


def _hashed(kind: str, key: str) -> str:
    return f"{kind}-{zlib.crc32(key.encode()):08x}"


def _torchrun_key() -> str:
    env = os.environ
    run = env["TORCHELASTIC_RUN_ID"]
    where = run if run != "none" else f"{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}"
    return f"{where}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def _hydra_control() -> str | None:
    """`host:port pgid` from the command line of the Hydra proxy that started this process (or its parent)."""
    for pid in ancestors():
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        if b"--control-port" in args and args[0].endswith(b"pmi_proxy"):
            i = args.index(b"--control-port")
            pgid = args[args.index(b"--pgid") + 1] if b"--pgid" in args[:-1] else b"0"
            return f"{args[i + 1].decode(errors='replace')} {pgid.decode(errors='replace')}"
    return None


def ancestors() -> Iterator[int]:
    """This process's parent, grandparent, ... (from /proc; nothing where there is no /proc)."""
    pid = os.getppid()
    for _ in range(256):
        if pid <= 1:
            return
        yield pid
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return


def agreed(candidate: str) -> str | None:
    """The run id of this job where the launcher holds a store its ranks share (torchrun's): the first rank
    to ask sets `candidate`, every rank gets that one. None elsewhere, or when the store cannot be reached
    (the caller then names the run by itself)."""
    env = os.environ
    if not env.get("TORCHELASTIC_RUN_ID") or not (env.get("MASTER_ADDR") and env.get("MASTER_PORT")):
        return None
    try:
        import torch.distributed as dist  # a torchrun job's script imports torch: here it usually is already

        store = dist.TCPStore(
            env["MASTER_ADDR"],
            int(env["MASTER_PORT"]),
            is_master=False,
            timeout=datetime.timedelta(seconds=STORE_TIMEOUT_S),
            wait_for_workers=False,
        )
        key = f"{_STORE_KEY}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        return store.compare_set(key, "", candidate).decode()
    except Exception as exc:  # (any failure of the store: the run is named without it)
        with contextlib.suppress(Exception):
            sys.stderr.write(f"distvlog: torchrun's store gave no run id ({type(exc).__name__}: {exc})\n")
        return None
