"""The precision a strategy trains in: the graph's float32 throughout, or bf16 mixed
precision (``"precision": "bf16"`` in a strategy file): ops compute in bfloat16 at the
device's bf16 peak, and the activations and their gradients, kept and sent between
devices, are bfloat16; the parameters stay float32 (the master weights), as do their
gradients, what sums them and the optimizer's state, as torch's autocast and
Megatron-LM keep them. Each op casts its parameters' blocks to bfloat16 as it uses them.

Precision is the user's choice, not a search move: bf16 is faster and smaller in any
simulation, so a chain would always take it, while what it changes is the numbers the
model trains with (``flextui search --precision bf16`` searches in it).
"""

from __future__ import annotations

from enum import StrEnum

from flextui.graph import OpGraph
from flextui.graph.precision import in_dtype


class Precision(StrEnum):
    FP32 = "fp32"
    BF16 = "bf16"

    @property
    def compute_dtype(self) -> str:
        """The dtype ops compute in, and activations are kept and sent in."""
        return "bfloat16" if self is Precision.BF16 else "float32"


def computed_graph(graph: OpGraph, precision: Precision) -> OpGraph:
    """``graph`` as a strategy in ``precision`` computes it: itself in fp32 (the graph's
    own dtype throughout), else its view in the compute dtype."""
    return graph if precision == Precision.FP32 else in_dtype(graph, precision.compute_dtype)
