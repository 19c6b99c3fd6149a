"""`paddle.base.framework`: the guards Paddle's debugging guide imports from here."""

from ..autograd import backward_vlog_guard, capture_backward_subgraph_guard
from ..logger import vlog_guard

__all__ = ["backward_vlog_guard", "capture_backward_subgraph_guard", "vlog_guard"]
