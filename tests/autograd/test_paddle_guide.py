"""Paddle's debugging guide (sections 1.1-1.3: the call-stack level, the VLOG controls, graph visualisation):
each example runs with `import paddle` replaced by `import distvlog as paddle` and does what the guide
shows, in distvlog's per-rank layout. Examples that depend on the environment or write files run as
scripts; the VLOG examples run in this process, their records captured."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import distvlog as paddle
from distvlog.launch.command import find_launcher, launcher_kind, mpi_command

ROOT = Path(__file__).resolve().parents[2]
GRAPHVIZ = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot is not installed")

INPLACE = """\
import distvlog as paddle
var_a = paddle.ones(shape=[4, 2, 3], dtype="float32")
var_a.stop_gradient = False

var_b = var_a**2
var_c = var_b**2  # pow_grad needs var_b
var_b[1:2] = 3.3  # bug: var_b is modified in place after being used
var_d = var_b**2
loss = paddle.nn.functional.relu(var_c + var_d)
loss.backward()
"""

MODEL = """\
import distvlog as paddle
import distvlog.nn as nn
class Model(nn.Layer):
    def __init__(self):
        super(Model, self).__init__()
        self.conv = nn.Sequential(
            nn.Conv2D(3, 6, 3, 1), nn.Sigmoid(), nn.MaxPool2D(2, 2),
            nn.Conv2D(6, 16, 3, 1), nn.Sigmoid(), nn.MaxPool2D(2, 2))
        self.fc = nn.Sequential(
            nn.Linear(16*6*6, 120), nn.Sigmoid(), nn.Linear(120, 84),
            nn.Sigmoid(), nn.Linear(84, 10))
    def forward(self, img):
        feature = self.conv(img)
        return self.fc(feature.reshape([img.shape[0], -1]))
model = Model(); x = paddle.randn([1, 3, 32, 32])
"""


def run_script(tmp_path: Path, source: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`source` as tmp_path/script.py, run there (so `./debug_info` is tmp_path/debug_info)."""
    script = tmp_path / "script.py"
    script.write_text(source)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_", "FLAGS_"))}
    clean.update(PYTHONPATH=str(ROOT), DISTVLOG_LOG_DIR=str(tmp_path / "logs"), **(env or {}))
    return subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=240
    )


def files_by_kind(directory: Path) -> dict[str, list[Path]]:
    """`<stamp>-<n>-rank<R>_<kind>` files grouped by kind (`backward_graph.dot`, ...)."""
    found: dict[str, list[Path]] = {}
    for p in sorted(directory.iterdir()):
        m = re.fullmatch(r"\d{8}-\d{6}\.\d{6}-\d+-rank(\d+)_(.+)", p.name)
        assert m, f"{p.name} is not named <timestamp>-<counter>-rank<R>_<what>"
        found.setdefault(m.group(2), []).append(p)
    return found


# -- 1.1 FLAGS_call_stack_level ----------------------------------------------------------------------------
@pytest.mark.parametrize("variable", ["FLAGS_call_stack_level", "DISTVLOG_CALL_STACK_LEVEL"])
def test_1_1_the_inplace_bug_names_the_node_tensor_versions_and_the_forward_traceback(tmp_path, variable):
    """At level 3 the error names pow2GradNode (var_c's: var_b's is pow1), the tensor changed in place and
    its versions, then the forward traceback pointing at `var_c = var_b**2`, line 6, before any node ran."""
    done = run_script(tmp_path, INPLACE, {variable: "3"})
    assert done.returncode == 1
    error = done.stderr[done.stderr.index("distvlog.autograd.engine.BackwardError: ") :]
    assert re.match(
        r"distvlog.autograd.engine.BackwardError: pow2GradNode\(0x[0-9a-f]+\) \(created at script.py:6\): its input "
        r"pow1_out_float32_4x2x3 was changed in place after the forward used it: version 1, saved at 0",
        error,
    )
    assert (
        f'Forward Traceback (most recent call last):\n  File "{tmp_path / "script.py"}", line 6, in <module>\n'
        "    var_c = var_b**2  # pow_grad needs var_b" in error
    )
    log = next((tmp_path / "logs").glob("*/rank-0.log")).read_text()
    assert "Running_AD_API_GRAD" not in log  # (nothing logs at level 0 anyway:) and no node ran


def test_1_1_below_level_3_the_error_gives_the_forward_line_only(tmp_path):
    done = run_script(tmp_path, INPLACE)
    assert done.returncode == 1
    assert re.search(r"BackwardError: pow2GradNode\(0x[0-9a-f]+\) \(created at script.py:6\): its input", done.stderr)
    assert "Forward Traceback" not in done.stderr


# -- 1.2 VLOG controls -------------------------------------------------------------------------------------
@pytest.fixture
def guide_vars():
    """The tensors the guide's VLOG examples use (it does not show how it made them)."""
    made = {}
    for name in ("x1", "x2", "y1", "y2"):
        made[name] = paddle.randn([2, 10])
        made[name].stop_gradient = False
    return made


def run_example(source: str, variables: dict) -> dict:
    namespace = {"paddle": paddle, **variables}
    exec(textwrap.dedent(source), namespace)
    return namespace


def node_levels(records, prefix: str) -> set[int]:
    return {r["v"] for r in records if str(r.get("node", "")).startswith(prefix)}


def test_1_2_vlog_guard_with_paddles_module_names_logs_forward_ops_at_4_and_grad_nodes_at_5(records, guide_vars):
    ns = run_example(
        """
        with paddle.base.framework.vlog_guard({"dygraph_functions": 4, "nodes": 5}):
            x3 = x1 + x2
            y3 = y1 - y2
            z = x3 * y3
            z.backward()
        """,
        guide_vars,
    )
    forward = [r["event"] for r in records if str(r["event"]).startswith("Running_AD_API:")]
    assert [f.split()[1] for f in forward] == ["add", "subtract", "multiply"]
    for node in (ns["x3"], ns["y3"], ns["z"]):
        assert max(node_levels(records, node.grad_fn.name)) == 5, "nodes=5"
    events = "\n".join(str(r["event"]) for r in records)
    assert "grad_stats" in events and "TensorInfo" in events and "ADInfo" not in events
    records.clear()
    (ns["x1"] * 2.0).sum().backward()  # after the guard: silent again
    assert not [r for r in records if "node" in r or str(r["event"]).startswith("Running_AD_API:")]


def test_1_2_backward_vlog_guard_6_logs_only_the_backward_of_its_line_with_unique_names(records, guide_vars):
    ns = run_example(
        """
        with paddle.utils.backward_vlog_guard(6):   # takes a level only, not a dict
            y3 = y1 - y2                            # only the backward of this line logs
        loss = (x1 * y3).sum()
        loss.backward()
        """,
        guide_vars,
    )
    node = ns["y3"].grad_fn
    assert {str(r["node"]) for r in records if "node" in r} == {node.name}
    assert not [r for r in records if str(r["event"]).startswith("Running_AD_API:")], "no forward lines"
    assert max(node_levels(records, node.name)) == 6
    events = "\n".join(str(r["event"]) for r in records)
    assert re.search(r"subtract\d+GradNode\(0x[0-9a-f]+\) begin run", events)
    assert f"Name: {node.out_name}@Grad" in events and re.fullmatch(r"subtract\d+_out_float32_2x10", node.out_name)
    assert "ADInfo" in events


def test_1_2_vlog_guard_6_around_backward_vlog_guard_6_logs_forward_and_backward_of_the_region(records, guide_vars):
    ns = run_example(
        """
        with paddle.base.framework.vlog_guard(6):   # forward and backward of one region
            with paddle.base.framework.backward_vlog_guard(6):
                y3 = y1 - y2
        (y3 * x1).sum().backward()
        """,
        guide_vars,
    )
    forward = [r["event"] for r in records if str(r["event"]).startswith("Running_AD_API:")]
    assert len(forward) == 1 and forward[0].startswith("Running_AD_API: subtract")
    assert max(node_levels(records, ns["y3"].grad_fn.name)) == 6
    assert {str(r["node"]) for r in records if "node" in r} == {ns["y3"].grad_fn.name}


def test_1_2_set_vlog_level_global_star_module_dict_and_reset(records, guide_vars):
    """`set_vlog_level(1)` and `{"*": 1}` are the global level; Paddle's module names reach the forward op
    lines and the grad nodes; module settings win over the global level, so the reset names them."""
    log = paddle.get_logger("guide_user_module")

    def step(tag: str) -> tuple[int, int, int]:
        records.clear()
        log.vlog(1, tag)
        run_example("z = (x1 + x2) * y1\nz.sum().backward()", guide_vars)
        user = len([r for r in records if r["event"] == tag])
        forward = len([r for r in records if str(r["event"]).startswith("Running_AD_API:")])
        nodes = len([r for r in records if "node" in r])
        return user, forward, nodes

    assert step("default") == (0, 0, 0)
    paddle.base.core.set_vlog_level(1)  # GLOG_v=1
    assert step("global 1") == (1, 0, 0)
    paddle.base.core.set_vlog_level(0)
    paddle.base.core.set_vlog_level({"*": 1})  # the same
    assert step("star 1") == (1, 0, 0)
    paddle.base.core.set_vlog_level({"dygraph_functions": 4, "nodes": 5})
    user, forward, nodes = step("modules")
    assert (user, forward) == (1, 3) and nodes > 0
    paddle.base.core.set_vlog_level({"*": 0})  # the modules keep their levels
    assert step("star 0")[1:] == (3, nodes)
    paddle.base.core.set_vlog_level({"dygraph_functions": 0, "nodes": 0, "*": 0})
    assert step("reset") == (0, 0, 0)


# -- 1.3 graph visualisation -------------------------------------------------------------------------------
@GRAPHVIZ
@pytest.mark.parametrize("guard", ["capture_fwd_graph_guard", "capture_forward_subgraph_guard"])
def test_1_3_the_forward_graph_of_a_region_includes_ops_that_feed_no_loss(tmp_path, guard):
    done = run_script(
        tmp_path,
        MODEL
        + textwrap.dedent(f"""
            with paddle.utils.{guard}("./debug_info/resnet_graph_test"):
                y = model(x)
                z = y + y        # does not feed the loss: absent from a backward graph, present in the forward one
            y.sum().backward()
        """),
    )
    assert done.returncode == 0, done.stderr
    files = files_by_kind(tmp_path / "debug_info")
    assert set(files) == {"resnet_graph_test.dot", "resnet_graph_test.svg"}
    assert "rank0_" in files["resnet_graph_test.dot"][0].name
    dot = files["resnet_graph_test.dot"][0].read_text()
    boxes = {label: op for op, label in re.findall(r'(op\d+) \[label="([^"\\]+)", shape=box', dot)}
    guide_layers = ["conv2d1", "sigmoid1", "pool2d1", "conv2d2", "sigmoid2", "pool2d2", "linear1", "sigmoid3"]
    guide_layers += ["linear2", "sigmoid4", "linear3"]
    order = [int(boxes[label][2:]) for label in guide_layers]
    assert order == sorted(order), "the layers' ops, in the order they ran"
    last = max(boxes, key=lambda label: int(boxes[label][2:]))
    assert re.fullmatch(r"add\d+", last), "z = y + y ran last"
    y_into_z = f'{boxes["linear3"]} -> {boxes[last]} [label="linear3_out_float32_1x10\\nfloat32[1, 10]"];'
    assert dot.count(y_into_z) == 2, "y, twice, into y + y"
    assert re.search(rf'out{boxes[last][2:]} \[label="{last}_out_float32_1x10', dot), "z: an end of the graph"
    assert re.search(r'\[label="randn1_out_float32_1x3x32x32\\nfloat32\[1, 3, 32, 32\]", shape=ellipse\]', dot)
    assert "<svg" in files["resnet_graph_test.svg"][0].read_text()


@GRAPHVIZ
def test_1_3_dump_backward_graph_path_writes_the_graph_of_every_backward_call(tmp_path):
    done = run_script(tmp_path, MODEL + 'y = model(x)\ny.sum().backward(dump_backward_graph_path="./debug_info")\n')
    assert done.returncode == 0, done.stderr
    files = files_by_kind(tmp_path / "debug_info")
    assert set(files) == {
        "backward_graph.dot", "backward_graph.svg", "ref_forward_graph.dot", "ref_forward_graph.svg",
        "call_stack.log",
    }  # fmt: skip
    dot = files["backward_graph.dot"][0].read_text()
    names = re.findall(r'\[label="(\w+)\\n0x[0-9a-f]+", fillcolor="(\w+)"\]', dot)
    assert ("conv2d1GradNode", "lightgrey") in names and ("sum1GradNode", "lightgrey") in names
    assert [colour for name, colour in names if name == "GradNodeAccumulation"] == ["turquoise3"] * 10
    assert re.search(r'-> n[0-9a-f]+ \[label="sigmoid1_out_float32_1x6x30x30@Grad\\nfloat32\\n\[1, 6, 30, 30\]"\]', dot)
    stacks = files["call_stack.log"][0].read_text()
    assert stacks.startswith("(each node's forward line only") and re.search(r"conv2d1GradNode\(0x", stacks)


def test_1_3_grad_and_autograd_backward_take_dump_backward_graph_path_too(tmp_path):
    x = paddle.to_tensor(np.array([1.0, 2.0]), dtype="float64", stop_gradient=False)
    paddle.grad((x * x).sum(), [x], dump_backward_graph_path=tmp_path / "grad")
    paddle.autograd.backward([(x * 3.0).sum()], dump_backward_graph_path=tmp_path / "backward")
    for what, op in (("grad", "multiply"), ("backward", "multiply")):
        files = files_by_kind(tmp_path / what)
        assert {"backward_graph.dot", "ref_forward_graph.dot", "call_stack.log"} <= set(files)
        assert re.search(rf"{op}\d+GradNode", files["backward_graph.dot"][0].read_text())
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])  # grad() left .grad alone


def test_1_3_without_the_argument_nothing_is_drawn(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x = paddle.to_tensor(np.array([1.0]), dtype="float64", stop_gradient=False)
    (x * x).sum().backward()
    paddle.grad((x * x).sum(), [x])
    assert list(tmp_path.iterdir()) == []


def test_1_3_capture_backward_subgraph_guard_and_backward_vlog_guard_from_paddle_utils(tmp_path, records):
    ns = run_example(
        MODEL
        + textwrap.dedent(f"""
            from paddle.utils import capture_backward_subgraph_guard, backward_vlog_guard
            with capture_backward_subgraph_guard({str(tmp_path / "sub")!r}), backward_vlog_guard(4):
                y = model.fc(model.conv(x).reshape([1, -1]))
            y.sum().backward()
        """).replace("from paddle.utils", "from distvlog.utils"),
        {},
    )
    files = files_by_kind(tmp_path / "sub")
    assert {"backward_graph.dot", "ref_forward_graph.dot", "call_stack.log"} <= set(files)
    assert "conv2d" in files["backward_graph.dot"][0].read_text()
    assert max(node_levels(records, ns["y"].grad_fn.name)) == 4


def test_1_3_every_rank_writes_its_own_file_set_into_one_directory(tmp_path):
    """Two ranks, one shared `./debug_info`: the forward graph and the backward dump of each, rank in the
    names, none overwritten."""
    script = tmp_path / "script.py"
    script.write_text(
        "import distvlog as paddle\npaddle.init()\n"
        "x = paddle.randn([2, 3]); x.stop_gradient = False\n"
        'with paddle.utils.capture_fwd_graph_guard("./debug_info/fwd"):\n'
        "    y = (x * 2.0).tanh()\n"
        'y.sum().backward(dump_backward_graph_path="./debug_info")\n'
    )
    launcher = find_launcher(None)
    cmd = mpi_command(launcher, launcher_kind(launcher), 2, {}, None) + [sys.executable, str(script)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTVLOG_", "GLOG_", "FLAGS_"))}
    env.update(PYTHONPATH=str(ROOT), DISTVLOG_LOG_DIR=str(tmp_path / "logs"))
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    files = files_by_kind(tmp_path / "debug_info")
    for kind in ("fwd.dot", "backward_graph.dot", "ref_forward_graph.dot", "call_stack.log"):
        ranks = sorted(re.search(r"-rank(\d+)_", p.name).group(1) for p in files[kind])
        assert ranks == ["0", "1"], kind
