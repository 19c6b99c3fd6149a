"""distvlog.torch never breaks a training feature: each case's gradients are identical with and without
distvlog (guards at levels 3-6 and the engine's level), and what cannot be read without side effects is said,
not read. Also: importing the adapter leaves the numpy engine unloaded."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch adapter's tests need torch (CI installs torch==2.13.0)")
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

import distvlog.torch as dvt  # noqa: E402


def test_importing_the_adapter_leaves_the_numpy_engine_unloaded():
    """The node log and graph dumps are engine-neutral (`distvlog.nodelog`): `import distvlog.torch` loads no
    module of `distvlog.autograd`."""
    code = "import sys, distvlog.torch; print(sorted(m for m in sys.modules if m.startswith('distvlog.autograd')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# -- the compatibility suite ------------------------------------------------------------------------------

# `DISTVLOG_TEST_DEVICE=cuda` runs the suite on a GPU (benchmarks/gpu_check.py does): there autograd runs
# backward on its device threads.
DEVICE = os.environ.get("DISTVLOG_TEST_DEVICE", "cpu")
MODES = [("guard", 3), ("guard", 4), ("guard", 5), ("guard", 6), ("engine", 5)]


def mlp(width: int = 8) -> nn.Module:
    return nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, width)).to(DEVICE)


def grads(model: nn.Module, *extra: torch.Tensor) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()] + [t.grad.clone() for t in extra]


def checkpointed(reentrant: bool):
    def case(guard):
        model, x = mlp(), torch.randn(4, 8, device=DEVICE, requires_grad=True)
        with guard():
            y = checkpoint(model, x, use_reentrant=reentrant).square().sum()
        y.backward()
        return grads(model, x)

    case.__name__ = "ckpt_reentrant" if reentrant else "ckpt_nonreentrant"
    return case


ckpt_nonreentrant, ckpt_reentrant = checkpointed(False), checkpointed(True)


def ckpt_nested(guard):
    inner, outer = mlp(), mlp()

    def block(h):
        return outer(checkpoint(inner, h, use_reentrant=False)) + checkpoint(inner, h, use_reentrant=True)

    x = torch.randn(4, 8, device=DEVICE, requires_grad=True)
    with guard():
        y = checkpoint(block, x, use_reentrant=False).sum()
    y.backward()
    return grads(inner, x) + grads(outer)


def compiled_with_checkpoint(guard):
    model = mlp()

    @torch.compile(backend="aot_eager")
    def step(x):
        return checkpoint(model, x, use_reentrant=False).relu().sum()

    x = torch.randn(4, 8, device=DEVICE, requires_grad=True)
    with guard():
        y = step(x)
    y.backward()
    return grads(model, x)


def compiled_module(guard):
    model = mlp()
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(4, 8, device=DEVICE, requires_grad=True)
    with guard():
        y = compiled(x).sum()
    y.backward()
    return grads(model, x)


def autocast(guard):
    model, x = mlp(), torch.randn(4, 8, device=DEVICE, requires_grad=True)
    with guard(), torch.autocast(DEVICE.split(":")[0], dtype=torch.bfloat16):
        y = model(x).float().sum()
    y.backward()
    return grads(model, x)


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * g


def custom_function(guard):
    model, x = mlp(), torch.randn(4, 8, device=DEVICE, requires_grad=True)
    with guard():
        y = Cube.apply(model(x))  # the region's last call: its node is made out of the mode's sight
    y.sum().backward()
    return grads(model, x)


def saved_tensor_hooks(guard):
    model, x = mlp(), torch.randn(4, 8, device=DEVICE, requires_grad=True)
    with guard(), torch.autograd.graph.saved_tensors_hooks(lambda t: t * 1, lambda t: t + 0):
        y = model(x).square().sum()
    with guard(), torch.autograd.graph.save_on_cpu():
        y = y + model(x).exp().sum()
    y.backward()
    return grads(model, x)


def double_backward(guard):
    model, x = mlp(), torch.randn(4, 8, device=DEVICE, requires_grad=True)
    with guard():
        y = model(x).square().sum()
    (gx,) = torch.autograd.grad(y, x, create_graph=True)
    gx.square().sum().backward()
    return grads(model, x)


def hooks_and_retained_graph(guard):
    model, x = mlp(), torch.randn(4, 8, device=DEVICE, requires_grad=True)
    with guard():
        h = model(x)
        h.register_hook(lambda g: g * 2)
        y = (h * h).sum()
    y.backward(retain_graph=True)
    y.backward()
    return grads(model, x)


def transformer_layer(guard):
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True).to(
        DEVICE
    )
    x = torch.randn(2, 5, 16, device=DEVICE)
    with guard():
        y = layer(x).square().mean()
    y.backward()
    return grads(layer)


def dataloader_workers(guard):
    data = torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randn(16, 8))  # on the CPU: workers fork
    loader = torch.utils.data.DataLoader(data, batch_size=8, num_workers=2)
    model = mlp()
    for x, target in loader:
        x, target = x.to(DEVICE), target.to(DEVICE)
        with guard():
            loss = (model(x) - target).square().mean()
        loss.backward()
    return grads(model)


def ddp_no_sync(guard):
    model = DistributedDataParallel(mlp())
    xs = torch.randn(3, 4, 8, device=DEVICE)
    with model.no_sync():
        for x in xs[:2]:
            with guard():
                loss = model(x).square().sum()
            loss.backward()
    with guard():
        loss = model(xs[2]).square().sum()
    loss.backward()
    return grads(model)


CASES = [
    ckpt_nonreentrant,
    ckpt_reentrant,
    ckpt_nested,
    compiled_module,
    compiled_with_checkpoint,
    autocast,
    custom_function,
    saved_tensor_hooks,
    double_backward,
    hooks_and_retained_graph,
    transformer_layer,
    dataloader_workers,
    ddp_no_sync,
]


def run(case, mode) -> list[torch.Tensor]:
    torch.manual_seed(0)
    if mode is None:
        return case(contextlib.nullcontext)
    kind, level = mode
    if kind == "guard":
        return case(lambda: dvt.backward_vlog_guard(level))
    with dvt.vlog_guard({"engine": level}):
        return case(contextlib.nullcontext)


@pytest.fixture(scope="module")
def process_group():
    """A one-rank gloo group, for DDP's no_sync."""
    if not dist.is_initialized():
        store = os.path.join(tempfile.mkdtemp(prefix="distvlog-compat-"), "store")
        backend = "nccl" if DEVICE.startswith("cuda") else "gloo"
        dist.init_process_group(backend, init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_gradients_are_identical_with_and_without_distvlog(case, records, process_group):
    """Each case under guards at levels 3-6 and under the engine's level 5: the job runs, its gradients are
    bit-identical to plain torch's, and the nodes it ran logged."""
    plain = run(case, None)
    for mode in MODES:
        before = len(records)
        got = run(case, mode)
        assert len(got) == len(plain)
        for a, b in zip(got, plain):
            assert torch.equal(a, b), (case.__name__, mode)
        logged = [r for r in records[before:] if r.get("node")]
        assert logged, (case.__name__, mode, "logged nothing")
        if mode[1] >= 4 and "compiled" in case.__name__:
            assert any(r["node"].startswith("compiled_function") for r in logged), mode
    if case in (ckpt_nonreentrant, ckpt_nested, saved_tensor_hooks):  # (reentrant checkpointing saves nothing)
        assert any("not read: packed by a saved_tensors_hooks hook" in str(r["event"]) for r in records)


# -- levels and threads ------------------------------------------------------------------------------------
def _backward_in_thread(loss: torch.Tensor, engine: int | None) -> int:
    """`loss.backward()` run by another thread (at engine level `engine` there); that thread's native id."""
    tid: list[int] = []

    def run() -> None:
        tid.append(threading.get_native_id())
        with dvt.vlog_guard({"engine": engine}) if engine is not None else contextlib.nullcontext():
            loss.backward()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=120)
    return tid[0]


def test_a_backward_run_from_another_thread_logs_at_that_threads_engine_level(records):
    """A graph made by this thread (engine level 0) and run backward by another at engine level 5: its nodes
    log at 5, and the records say the other thread ran them."""
    x = torch.randn(3, 3, device=DEVICE, requires_grad=True)
    loss = (x.sin() * 2).sum()
    tid = _backward_in_thread(loss, 5)
    mine = [r for r in records if r.get("node")]
    assert {re.sub(r"\d+GradNode$", "", r["node"]) for r in mine} >= {"sin", "multiply", "sum"}
    assert {r["v"] for r in mine} >= {3, 4, 5}
    assert_ran_by(mine, tid)


def test_guarded_nodes_log_at_their_guards_level_whichever_thread_runs_them(records):
    """Nodes a guard tagged here at level 4, run backward by a thread whose engine level is 0: they log at 4,
    in that thread."""
    x = torch.randn(3, 3, device=DEVICE, requires_grad=True)
    with dvt.backward_vlog_guard(4):
        loss = x.cos().sum()
    tid = _backward_in_thread(loss, None)
    mine = [r for r in records if r.get("node")]
    assert mine and max(r["v"] for r in mine) == 4
    assert_ran_by(mine, tid)


def assert_ran_by(records: list[dict], tid: int) -> None:
    """On CPU the thread that called backward runs the nodes; on a GPU autograd's device thread does, which is
    neither that thread nor this one."""
    tids = {r["tid"] for r in records}
    if DEVICE == "cpu":
        assert tids == {tid}
    else:
        assert len(tids) == 1 and not tids & {tid, threading.get_native_id()}


def test_a_guard_inside_a_compiled_function_breaks_no_graph(records):
    """torch.compile traces through a guard inside the function (it steps aside while compiling)."""
    from torch._dynamo.utils import counters

    counters.clear()

    @torch.compile(backend="eager", fullgraph=True)  # fullgraph: a graph break would raise
    def f(x):
        with dvt.backward_vlog_guard(4):
            y = x.tanh() * 3
        return y.sum()

    x = torch.randn(4, device=DEVICE, requires_grad=True)
    f(x).backward()
    assert torch.allclose(x.grad, 3 * (1 - x.detach().tanh() ** 2))
    assert not counters["graph_break"]


# -- statistics computed on the device, logged when they arrive ---------------------------------------------
def test_device_statistics_match_the_hosts_and_arrive_in_order():
    """The device path (run here on CPU tensors): norm, NaN/Inf counts, min, max and mean as the host's
    grad_stats gives them; a checksum equal for equal bytes and changed by swapping two elements; the requests
    emitted in the order they were made."""
    from distvlog.nodelog import grad_stats
    from distvlog.torch._device import DeviceStats, DeviceValues, device_stats

    t = torch.randn(33, 7)
    t[3, 2], t[5, 1] = float("nan"), float("-inf")
    got, want = DeviceValues(device_stats(t)), grad_stats(t.numpy())
    assert (got.nan, got.inf) == (want["nan"], want["inf"]) == (1, 1)
    for key in ("norm", "min", "max", "mean"):
        assert getattr(got, key) == pytest.approx(want[key], rel=1e-5), key
    swapped = t.clone()
    swapped[0, 0], swapped[0, 1] = t[0, 1], t[0, 0]
    assert (
        DeviceValues(device_stats(t.clone())).checksum == got.checksum != DeviceValues(device_stats(swapped)).checksum
    )
    queue, seen = DeviceStats(), []
    for i in range(3):
        queue.submit([torch.full((4,), float(i))], lambda values, i=i: seen.append((i, values[0].max)))
    queue.drain(wait=True)
    assert seen == [(0, 0.0), (1, 1.0), (2, 2.0)]


DDP_JOB = """
import os, sys, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import distvlog.torch as dvt
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
torch.manual_seed(0)
model = dvt.log_ddp(DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    with dvt.backward_vlog_guard(4 if step < 2 else 5):  # device tensors are read without a copy below 5
        loss = model(torch.randn(4, 8)).square().sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
dvt.finalize()
"""


def test_ddp_records_through_the_device_path_match_the_host_path(tmp_path):
    """The same one-rank DDP job with DISTVLOG_DEVICE_STATS=1 (statistics on the device, copied
    asynchronously) and without: the same allreduce records in the same order, the same norms, a checksum per
    bucket and one digest per parameter each step, the same node log (a guard at 4, then 5)."""
    runs = {}
    for forced in ("0", "1"):
        logs = tmp_path / f"logs{forced}"
        env = {
            **os.environ,
            "DISTVLOG_LOG_DIR": str(logs),
            "DISTVLOG_FORMAT": "jsonl",
            "DISTVLOG_DEVICE_STATS": forced,
        }
        env = {k: v for k, v in env.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        done = subprocess.run(
            [sys.executable, "-c", DDP_JOB, str(tmp_path / f"store{forced}")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        (path,) = [p for p in logs.glob("*/rank-0.jsonl") if not p.parent.is_symlink()]
        runs[forced] = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    shape = {}
    for forced, records in runs.items():
        shape[forced] = [
            (
                r.get("node", r["event"]),
                r.get("step"),
                r.get("bucket"),
                round(r.get("norm", 0.0), 5),
                len(r.get("digests", ())),
            )
            for r in records
            if r["event"] in ("allreduce begin", "allreduce end", "parameters")
            or str(r["event"]).endswith("begin run")
            or r["event"] == "grad_stats"
        ]
        assert all(len(r["checksum"]) == 16 for r in records if "checksum" in r)
    assert shape["1"] == shape["0"] and len(shape["0"]) >= 3 * 3
