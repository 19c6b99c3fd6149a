"""Packages talk through public faces: nothing outside distvlog/autograd writes a Tensor's private fields
(layers, initializers and optimizers change parameters through `set_value`, `cast_` and in-place ops)."""

from __future__ import annotations

import ast
from pathlib import Path

import distvlog as dv

PACKAGE = Path(dv.__file__).parent
PRIVATE = {name for name in dv.Tensor.__slots__ if name.startswith("_") and not name.startswith("__")}


def writes_to_private_tensor_fields(source: str, where: str) -> list[str]:
    """`obj._field = ...`, `obj._field += ...`, `obj._field[...] = ...` with `_field` one of Tensor's private
    slots, on anything but `self` (other classes may have fields of the same name)."""
    found = []
    for node in ast.walk(ast.parse(source, where)):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        )
        for target in targets:
            while isinstance(target, ast.Subscript):
                target = target.value
            if (
                isinstance(target, ast.Attribute)
                and target.attr in PRIVATE
                and not (isinstance(target.value, ast.Name) and target.value.id == "self")
            ):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_nothing_outside_autograd_writes_a_tensors_private_fields():
    assert {"_data", "_vc", "_base", "_accum", "_node"} <= PRIVATE
    outside = [p for p in PACKAGE.rglob("*.py") if "autograd" not in p.relative_to(PACKAGE).parts]
    assert outside, "the package's other modules"
    writes = [w for p in outside for w in writes_to_private_tensor_fields(p.read_text(), str(p.relative_to(PACKAGE)))]
    assert writes == []


def test_the_check_finds_such_writes():
    source = (PACKAGE / "optim" / "sgd.py").read_text()
    assert "param.subtract_(lr * grad)" in source
    broken = source.replace("param.subtract_(lr * grad)", "param._data -= lr * grad\n        p.grad._data[0] = 1")
    found = writes_to_private_tensor_fields(broken, "sgd.py")
    assert len(found) == 2 and "param._data -= lr * grad" in found[0] and "p.grad._data[0] = 1" in found[1]


def test_job_control_lives_in_distributed_job():
    """The exit rules of a job of several ranks (a replaced sys.exit, MPI's or Hydra's abort) are distributed's:
    the logger calls them from its hooks, its own modules neither replace sys.exit nor end a job."""
    logger_source = {p.name: p.read_text() for p in (PACKAGE / "logger").glob("*.py")}
    for marker in ("sys.exit = ", "Abort(", "cmd=abort", "builtins"):
        assert [name for name, text in logger_source.items() if marker in text] == [], marker
    job = (PACKAGE / "distributed" / "job.py").read_text()
    assert all(marker in job for marker in ("sys.exit = ", "Abort(", "cmd=abort", "builtins"))
    assert "logger" not in {n.split(".")[-1] for n in _imported_modules(job)}, "job.py is given what it needs"


def _imported_modules(source: str) -> set[str]:
    return {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
