"""Op types. Importing this package registers every built-in type in ``OP_TYPES``."""

from flextui.graph.ops import attention, basic, conv, dense, opaque, recurrent  # noqa: F401
from flextui.graph.ops.base import OP_TYPES, OpType, ParamSpec, op_type

__all__ = ["OP_TYPES", "OpType", "ParamSpec", "op_type"]
