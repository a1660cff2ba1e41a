"""The LSTM cell: one time step of one layer. Unrolled steps share its parameters."""

from __future__ import annotations

from flextui.graph.dims import Dim, DimKind
from flextui.graph.ops.base import OpType, ParamSpec, register, require
from flextui.graph.region import region_volume


@register
class LSTMCell(OpType):
    """Inputs x [B, In] and, after the first step, h [B, H] and c [B, H]; outputs the
    new h and c. Space: batch (sample) x hidden units (parameter). Weights are stored
    gate-major, [4, H, ...], so a block of hidden units owns a block of every gate.
    Parameter count equals torch.nn.LSTMCell's (two biases)."""

    name = "lstm_cell"
    backward_factor = 2.0

    def check(self, op):
        require(len(op.inputs) in (1, 3), op, "takes x, or x, h and c")
        b, hidden = op.inputs[0].shape[0], op.attrs["hidden"]
        require(op.inputs[0].rank == 2, op,
                f"x must be [batch, features], got {op.inputs[0].shape}")
        for t in op.inputs[1:]:
            require(t.shape == (b, hidden), op, f"state must be {[b, hidden]}, got {list(t.shape)}")

    def infer(self, op):
        shape = (op.inputs[0].shape[0], op.attrs["hidden"])
        return [(shape, op.inputs[0].dtype), (shape, op.inputs[0].dtype)]

    def space(self, op):
        b, h = op.outputs[0].shape
        return (Dim("sample", b, DimKind.SAMPLE), Dim("hidden", h, DimKind.PARAMETER))

    def params(self, op):
        h, inp = op.attrs["hidden"], op.inputs[0].shape[1]
        return [ParamSpec("weight_ih", (4, h, inp), (None, 1, None)),
                ParamSpec("weight_hh", (4, h, h), (None, 1, None)),
                ParamSpec("bias_ih", (4, h), (None, 1)),
                ParamSpec("bias_hh", (4, h), (None, 1))]

    def input_regions(self, op, region):
        rows = region[0]
        x = (rows, (0, op.inputs[0].shape[1]))
        if len(op.inputs) == 1:
            return [x]
        return [x, (rows, (0, op.attrs["hidden"])), region]

    def flops(self, op, region):
        fan_in = op.inputs[0].shape[1] + op.attrs["hidden"]
        return region_volume(region) * (4 * 2.0 * fan_in + 10)
