"""The device check of distvlog.torch: everything the CPU tests cannot show, in one run on one GPU.

    python benchmarks/gpu_check.py                 # on a machine with one CUDA GPU, from the repository root
    python benchmarks/gpu_check.py --device cpu    # the same checks with CPU tensors (NCCL rows skipped)

Prints one table (check, result, detail) and exits 1 if any check failed; about 5 minutes on one GPU.
Checks: the Paddle pull request's example with CUDA tensors (only the multiply node logs); the compatibility
suite (tests/pytorch/test_compat.py) on the device, where autograd runs backward on its device threads; a
1-rank NCCL job and a 4-process gloo job with CUDA tensors on the same GPU, merged and diffed clean; a NaN
planted on one rank, found by `distvlog diff`; the step time of a small conv net and an MLP at guard levels
0 / 4 / 5 and with DDP's records on, each against the same step without distvlog, measured side by side
(goals: level 0 <= 1.02, records on <= 1.05); an NCCL Flight Recorder dump read by `distvlog merge`, where
the build has its reader.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"guard level 0": 1.02, "DDP records on": 1.05}
_rows: list[tuple[str, str, str]] = []


def row(check: str, ok: bool | str | None, detail: str) -> None:
    """One line of the table: ok True PASS, False FAIL, None skip, "info" a figure with no goal."""
    _rows.append((check, {True: "PASS", False: "FAIL", None: "skip"}.get(ok, "info"), detail))
    print(f"  {check}: {_rows[-1][1]}  {detail}", flush=True)


def env(logs: Path, **extra: str) -> dict[str, str]:
    drop = ("DISTVLOG_", "GLOG_", "MASTER_", "TORCHELASTIC_")
    base = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in ("RANK", "WORLD_SIZE")}
    return {**base, "PYTHONPATH": str(ROOT), "DISTVLOG_LOG_DIR": str(logs), "OMP_NUM_THREADS": "1", **extra}


def run(cmd: list[str], logs: Path, timeout: int = 300, **extra: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, env=env(logs, **extra), cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(cmd, 124, exc.stdout or "", f"timed out after {timeout} s")


def tail(proc: subprocess.CompletedProcess) -> str:
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return lines[-1][:100] if lines else f"exit {proc.returncode}"


# -- the checks --------------------------------------------------------------------------------------------
PADDLE_EXAMPLE = """
import sys, torch
from distvlog.torch import backward_vlog_guard
device = sys.argv[1]
x = torch.randn(2, 3, dtype=torch.float32, device=device).requires_grad_()
y = torch.randn(2, 3, dtype=torch.float64, device=device).requires_grad_()
z1 = x - y
z2 = x + y
with backward_vlog_guard(4):
    z3 = z1 * z2
z3.sum().sum().backward()
"""


def paddle_example(device: str, work: Path) -> None:
    logs = work / "paddle"
    proc = run([sys.executable, "-c", PADDLE_EXAMPLE, device], logs)
    if proc.returncode != 0:
        return row("Paddle PR example", False, tail(proc))
    text = (logs / "latest" / "rank-0.log").read_text()
    nodes = {part.split()[0] for part in text.split(" node=")[1:]}
    row("Paddle PR example", nodes == {"multiply1GradNode"}, f"nodes that logged: {sorted(nodes)}")


def compat_suite(device: str, work: Path) -> None:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/pytorch/test_compat.py"]
    proc = run(cmd, work / "compat", timeout=420, DISTVLOG_TEST_DEVICE=device)
    summary = next((line for line in reversed(proc.stdout.splitlines()) if " in " in line), tail(proc))
    row("compatibility suite + device threads", proc.returncode == 0, summary.strip("= "))


JOB = """
import os, sys, time, torch, torch.nn as nn, torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
import distvlog.torch as dvt
backend, steps, nan_rank = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dvt.init(backend=backend)
rank = torch.distributed.get_rank()
device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")  # one GPU for all ranks
if device.type == "cuda":
    torch.cuda.set_device(device)
torch.manual_seed(0)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 10)
    def forward(self, x, poison):
        h = F.relu(self.fc1(x))
        with dvt.backward_vlog_guard(5):
            h = F.relu(self.fc2(h))
            h = h + 0.0 * (h - h + poison) ** 0.5  # NaN in backward where poison is 0
        return self.fc3(h)
model = dvt.log_ddp(DDP(Net().to(device), device_ids=[0] if device.type == "cuda" else None))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(steps):
    torch.manual_seed(step * 100 + rank)
    x, y = torch.randn(32, 64, device=device), torch.randint(0, 10, (32,), device=device)
    poison = torch.tensor(0.0 if (rank == nan_rank and step == 2) else 1.0, device=device)
    F.cross_entropy(model(x, poison), y).backward()
    opt.step()
    opt.zero_grad()
dvt.finalize()
"""


def job(name: str, work: Path, world: int, backend: str, nan_rank: int = -1) -> tuple[Path, bool]:
    """A DDP job through torchrun; its log root, and whether it ran."""
    logs = work / "".join(c if c.isalnum() else "_" for c in name)
    proc = run([*torchrun(world, work, JOB), backend, "5", str(nan_rank)], logs)
    if proc.returncode != 0:
        row(name, False, tail(proc))
        return logs, False
    return logs, True


def torchrun(world: int, work: Path, script: str) -> list[str]:
    """torchrun on a free port running `script` (torchrun takes a file)."""
    path = work / ("fr_job.py" if "DUMP" in script else "ddp_job.py")
    path.write_text(script)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}", str(path)]


def cli(*args: str | Path, logs: Path) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "distvlog", *map(str, args)], logs)


def clean_job(name: str, work: Path, world: int, backend: str) -> None:
    logs, ran = job(name, work, world, backend)
    if not ran:
        return
    merged, diffed = cli("merge", logs, logs=logs), cli("diff", logs, logs=logs)
    ok = merged.returncode == 0 and diffed.returncode == 0
    begins = merged.stdout.count("allreduce begin")
    row(name, ok, f"merge exit {merged.returncode}, diff exit {diffed.returncode}, {begins} allreduce begin records")


def planted_nan(work: Path) -> None:
    logs, ran = job("planted NaN (4 gloo ranks)", work, 4, "gloo", nan_rank=2)
    if not ran:
        return
    out = cli("diff", logs, logs=logs)
    found = out.returncode == 1 and "NaN/Inf origin: rank 2 step 2" in out.stdout
    origin = next((line for line in out.stdout.splitlines() if "origin" in line), tail(out))
    row("planted NaN found by diff", found, origin.strip()[:100])


def flight_recorder(work: Path) -> None:
    """An NCCL Flight Recorder dump of a 1-rank job, given to `distvlog merge` with the run."""
    logs = work / "fr"
    script = JOB.replace(
        "dvt.finalize()",
        "open(os.environ['DUMP'], 'wb').write(torch._C._distributed_c10d._dump_nccl_trace())\ndvt.finalize()",
    )
    dump = work / "nccl_trace_rank_0"
    proc = run(
        [*torchrun(1, work, script), "nccl", "3", "-1"], logs, TORCH_NCCL_TRACE_BUFFER_SIZE="2000", DUMP=str(dump)
    )
    if proc.returncode != 0 or not dump.exists():
        return row("NCCL Flight Recorder dump", False, tail(proc))
    merged = cli("merge", logs, dump, logs=logs)
    if merged.returncode == 2:
        return row("NCCL Flight Recorder dump", None, f"this build's merge does not read it: {tail(merged)}")
    row("NCCL Flight Recorder dump", merged.returncode == 0 and "allreduce" in merged.stdout.lower(), tail(merged))


# -- step time ---------------------------------------------------------------------------------------------
def step_times(device: str, steps: int) -> None:
    """Each model's step, plain and under each setting, alternated in rounds; the median ratio per setting."""
    import statistics

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    import distvlog.torch as dvt

    if not dist.is_initialized():
        store = tempfile.mkdtemp(prefix="gpu-check-") + "/store"
        backend = "nccl" if device == "cuda" else "gloo"
        dist.init_process_group(backend, init_method=f"file://{store}", rank=0, world_size=1)
    models = {
        "conv net": (
            lambda: nn.Sequential(
                nn.Conv2d(3, 32, 3, padding=1),
                nn.ReLU(),
                nn.Conv2d(32, 32, 3, padding=1),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(32, 10),
            ),
            lambda: torch.randn(32, 3, 32, 32, device=device),
        ),
        "MLP": (
            lambda: nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)),
            lambda: torch.randn(64, 256, device=device),
        ),
    }
    settings = {
        "guard level 0": lambda: dvt.backward_vlog_guard(0),
        "guard level 4": lambda: dvt.backward_vlog_guard(4),
        "guard level 5": lambda: dvt.backward_vlog_guard(5),
        "DDP records on": None,
    }
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for name, (make, data) in models.items():
        torch.manual_seed(0)
        plain = DDP(make().to(device))
        logged = dvt.log_ddp(DDP(make().to(device)))
        x = data()

        def timed(model, guard, x=x) -> float:
            sync()
            start = time.perf_counter()
            for _ in range(steps):
                with guard() if guard else contextlib.nullcontext():
                    loss = model(x).square().mean()
                loss.backward()
            sync()
            return (time.perf_counter() - start) / steps

        for setting in settings:  # warm-up
            timed(logged if setting == "DDP records on" else plain, settings[setting])
        ratios: dict[str, list[float]] = {s: [] for s in settings}
        for _ in range(5):
            for setting, guard in settings.items():
                base = timed(plain, None)
                ratios[setting].append(timed(logged if guard is None else plain, guard) / base)
        for setting, values in ratios.items():
            ratio = statistics.median(values)
            goal = GOALS.get(setting)
            ok = "info" if goal is None else ratio <= goal
            row(f"step time {name}, {setting}", ok, f"ratio {ratio:.3f}" + (f" (goal <= {goal})" if goal else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--steps", type=int, default=20, help="steps per timing (default 20)")
    parser.add_argument("--skip", action="append", default=[], help="a check to leave out (by its function name)")
    args = parser.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); --device cpu runs the CPU rows")
        return 2
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU"
    print(f"distvlog gpu_check: {gpu}, torch {torch.__version__}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="distvlog-gpu-check-"))
    os.environ["DISTVLOG_LOG_DIR"] = str(work / "timing")  # the step-time rows log in this process
    checks = [
        ("paddle_example", lambda: paddle_example(args.device, work)),
        ("compat_suite", lambda: compat_suite(args.device, work)),
        ("nccl_job", lambda: clean_job("1-rank NCCL job", work, 1, "nccl")),
        ("gloo_job", lambda: clean_job(f"4-rank gloo job, {args.device} tensors", work, 4, "gloo")),
        ("planted_nan", lambda: planted_nan(work)),
        ("flight_recorder", lambda: flight_recorder(work)),
        ("step_times", lambda: step_times(args.device, args.steps)),
    ]
    needs_cuda = {"nccl_job", "flight_recorder"}
    for name, check in checks:
        if name in args.skip:
            continue
        if name in needs_cuda and args.device != "cuda":
            row(name, None, "needs CUDA")
            continue
        try:
            check()
        except Exception as exc:  # a check that breaks is a failed row, the others still run
            row(name, False, f"{type(exc).__name__}: {exc}"[:100])
    width = max(len(c) for c, _, _ in _rows)
    print(f"\n{'check'.ljust(width)}  result  detail")
    for check, result, detail in _rows:
        print(f"{check.ljust(width)}  {result.ljust(6)}  {detail}")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if any(result == "FAIL" for _, result, _ in _rows) else 0


if __name__ == "__main__":
    sys.exit(main())
