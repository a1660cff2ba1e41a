"""Op types. Importing this package registers every built-in type in ``OP_TYPES``."""

from flextui.graph.ops import (  # noqa: F401
    attention,
    basic,
    conv,
    dense,
    layout,
    opaque,
    recurrent,
    reduce,
)
from flextui.graph.ops.base import OP_TYPES, OpType, ParamSpec, op_type

__all__ = ["OP_TYPES", "OpType", "ParamSpec", "op_type"]
