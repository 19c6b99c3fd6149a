"""What a backward node shows, whichever engine ran it: Paddle's node log lines (`NodeLog`, `grad_stats`) and
the backward graph dumps, over nodes read as `NodeView`s. The numpy engine (`distvlog.autograd`) and the
PyTorch adapter (`distvlog.torch`) both print through it; it imports neither.
"""

from ._dumps import backward_files, dot_label, dump_dir, grad_tensors_text, write_set
from ._lines import ENGINE, MAX_VALUES, NodeLog, grad_stats
from ._view import NOT_READ, NodeView, Site, dtype_name, shape_list, shape_text, tensor_name

__all__ = [
    "ENGINE",
    "MAX_VALUES",
    "NOT_READ",
    "NodeLog",
    "NodeView",
    "Site",
    "backward_files",
    "dot_label",
    "dump_dir",
    "grad_tensors_text",
    "grad_stats",
    "shape_list",
    "shape_text",
    "dtype_name",
    "tensor_name",
    "write_set",
]
