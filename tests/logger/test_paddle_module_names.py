"""Paddle's module names in verbosity rules: those with a counterpart set it, those without are named once
on stderr, `*` is the global level, and every other name stays a module of yours."""

from __future__ import annotations

from distvlog.logger import _paddle_modules
from distvlog.logger._rules import Rules, _rules_from_env


def test_the_guides_everyday_vmodule_sets_the_forward_op_lines_and_the_backward():
    rules = Rules(0).updated("dygraph_functions=4,nodes=4,tracer=3,backward=3")
    assert rules.level_for("distvlog.autograd.ops") == 4, "dygraph_functions=4 and tracer=3: the higher"
    assert rules.level_for("distvlog.autograd.engine") == 4, "nodes=4 and backward=3: one module here"
    assert rules.level_for("distvlog.distributed.parallel") == 0


def test_glog_vmodule_from_the_environment_takes_paddles_names(monkeypatch):
    monkeypatch.setenv("GLOG_vmodule", "nodes=5,reducer=1")
    monkeypatch.delenv("DISTVLOG_VMODULE", raising=False)
    rules = _rules_from_env()
    assert rules.level_for("distvlog.autograd.engine") == 5 and rules.level_for("distvlog.distributed.parallel") == 1


def test_a_module_of_yours_with_a_paddle_name_keeps_its_level():
    rules = Rules(0).updated({"nodes": 3})
    assert rules.level_for("myproject.nodes") == 3 and rules.level_for("distvlog.autograd.engine") == 3


def test_star_is_the_global_level_and_module_settings_win_over_it():
    rules = Rules(0).updated({"*": 1})
    assert rules.level == 1 and rules.patterns == () and rules.level_for("anything") == 1
    rules = rules.updated({"dygraph_functions": 4}).updated({"*": 0})
    assert rules.level_for("distvlog.autograd.ops") == 4 and rules.level_for("anything") == 0
    assert Rules(0).updated({"dygraph_functions": 0, "*": 0}).level_for("distvlog.autograd.ops") == 0


def test_a_paddle_module_without_a_counterpart_is_named_once_on_stderr(capsys, monkeypatch):
    monkeypatch.setattr(_paddle_modules, "_warned", set())
    rules = Rules(2).updated({"auto_growth_best_fit_allocator": 5}).updated("auto_growth_best_fit_allocator=6")
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "distvlog: vmodule 'auto_growth_best_fit_allocator' is Paddle's module for memory allocation, which has "
        "no counterpart in distvlog: its level reaches only a module of yours named 'auto_growth_best_fit_allocator'"
    ]
    assert rules.level_for("auto_growth_best_fit_allocator") == 6, "accepted: a module of yours may have the name"
    assert rules.level_for("distvlog.autograd.engine") == 2


def test_any_other_name_is_a_module_of_yours(capsys):
    rules = Rules(0).updated({"train": 2, "data*": 1})
    assert rules.level_for("train") == 2 and rules.level_for("dataset") == 1
    assert rules.level_for("distvlog.autograd.ops") == 0 and capsys.readouterr().err == ""
