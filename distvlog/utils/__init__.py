"""`paddle.utils`: the graph capture guards and backward_vlog_guard, as Paddle code imports them.

`capture_fwd_graph_guard(prefix)` (and its other name, `capture_forward_subgraph_guard`) draws the forward
ops run inside; `capture_backward_subgraph_guard(dir)` the backward subgraph of the nodes created inside;
both per thread, with the rank in every file name (see `distvlog.autograd.graphviz`).
"""

from ..autograd import (
    backward_vlog_guard,
    capture_backward_subgraph_guard,
    capture_forward_subgraph_guard,
    capture_fwd_graph_guard,
)

__all__ = [
    "backward_vlog_guard",
    "capture_backward_subgraph_guard",
    "capture_forward_subgraph_guard",
    "capture_fwd_graph_guard",
]
