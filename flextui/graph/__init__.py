"""The operator graph IR: tensors, parameters, ops, graphs, and the builder API."""

from flextui.graph.builder import GraphBuilder, graph_from_dict
from flextui.graph.dims import Dim, DimKind
from flextui.graph.graph import OpGraph
from flextui.graph.op import Op
from flextui.graph.ops import OP_TYPES, ParamSpec
from flextui.graph.region import Region, full_region, intersect, region_volume
from flextui.graph.tensor import DTYPE_BYTES, FLOAT_DTYPES, DType, Parameter, Tensor

__all__ = ["GraphBuilder", "graph_from_dict", "Dim", "DimKind", "OpGraph", "Op", "OP_TYPES",
           "ParamSpec", "Region", "full_region", "intersect", "region_volume",
           "DTYPE_BYTES", "FLOAT_DTYPES", "DType", "Parameter", "Tensor"]
