"""Paddle's module names in verbosity rules (`GLOG_vmodule`, `vlog_guard` and `set_vlog_level` dicts).

Paddle's vmodule names are the basenames of its C++ files. Those with a counterpart here set that module
of ours as well (a module of yours with the same name keeps getting the level too):

| Paddle module | what it logs in Paddle | distvlog module |
|---|---|---|
| `dygraph_functions` | forward op functions (Running_AD_API, inputs and outputs) | `ops` (the forward op lines) |
| `tracer`, `eager_functions`, `eager_method`, `eager_math_op_patch` | op tracing, Python API entry points | `ops` |
| `nodes` | each grad node's run: banners, tensor dumps | `engine` (the grad nodes' lines) |
| `backward`, `general_grad` | the backward engine (begin run, Found pending node), `paddle.grad` | `engine` |
| `grad_node_info`, `grad_tensor_holder`, `accumulation_node`, `tensor_wrapper` | edges, Sum/Move, leaf accumulation, saved tensors | `engine` |
| `backward_api_base`, `backward_api` | a grad kernel's key and signature | `engine` |
| `reducer`, `process_group_nccl`, `ProcessGroupNCCL` | DataParallel's buckets, collectives | `parallel` (allreduce records) |
| `*` (Paddle's dict key) | the global level, below every module setting | the global level (`DISTVLOG_V`) |

The grad nodes' lines and the engine's are one module here (`engine`), so `nodes=4` and `backward=4` set
the same thing; when one rule names several Paddle modules of one counterpart, the highest level wins.
Paddle modules with no counterpart here (`api_base`, `eager_utils`, `autograd_meta`, the allocators, the
static-graph executors, `amp_auto_cast`, `gpu_resources`, ...) are accepted with one warning per name on
stderr, never silently ignored: the level then only reaches a module of yours with that name. Any other
name is a module of yours, as always.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

GLOBAL = "*"
COUNTERPARTS: dict[str, str] = {
    "dygraph_functions": "ops",
    "tracer": "ops",
    "eager_functions": "ops",
    "eager_method": "ops",
    "eager_math_op_patch": "ops",
    "nodes": "engine",
    "backward": "engine",
    "general_grad": "engine",
    "grad_node_info": "engine",
    "grad_tensor_holder": "engine",
    "accumulation_node": "engine",
    "tensor_wrapper": "engine",
    "backward_api_base": "engine",
    "backward_api": "engine",
    "reducer": "parallel",
    "process_group_nccl": "parallel",
    "ProcessGroupNCCL": "parallel",
}
WITHOUT_COUNTERPART: dict[str, str] = {
    "api_base": "forward kernel selection",
    "api": "forward kernel selection",
    "eager_utils": "eager utilities",
    "autograd_meta": "autograd metadata",
    "auto_growth_best_fit_allocator": "memory allocation",
    "allocator_facade": "memory allocation",
    "stream_safe_cuda_allocator": "memory allocation",
    "interpretercore": "the static-graph executor",
    "program_interpreter": "the static-graph executor",
    "pir_interpreter": "the static-graph executor",
    "operator": "static-graph operators",
    "amp_auto_cast": "automatic mixed precision",
    "gpu_resources": "GPU devices",
    "nccl_comm_context": "NCCL communicators",
}
_warned: set[str] = set()


def translate(spec: Mapping[str, int]) -> tuple[int | None, dict[str, int]]:
    """The global level a rule sets (Paddle's `*` key; None when it sets none) and its module patterns, each
    Paddle name joined by its counterpart here; a name set twice this way gets the highest level."""
    patterns: dict[str, int] = {}
    for name, level in spec.items():
        if name == GLOBAL:
            continue
        for target in (name, COUNTERPARTS.get(name)):
            if target is not None:
                patterns[target] = max(level, patterns.get(target, level))
        if name in WITHOUT_COUNTERPART:
            _warn(name)
    return spec.get(GLOBAL), patterns


def _warn(name: str) -> None:
    """One line on stderr per name and process (the rules may be read before any log file exists)."""
    if name in _warned:
        return
    _warned.add(name)
    try:
        sys.stderr.write(
            f"distvlog: vmodule {name!r} is Paddle's module for {WITHOUT_COUNTERPART[name]}, which has no "
            f"counterpart in distvlog: its level reaches only a module of yours named {name!r}\n"
        )
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass  # no stderr: the rule applies all the same
