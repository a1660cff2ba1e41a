"""The LSTM cell kernel."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from flextui.graph.kernels.base import Kernel, register


@register
class LSTMCellKernel(Kernel):
    """torch.nn.LSTMCell's step (gates i, f, g, o) for a block of samples and hidden
    units: the block reads all of x and h for its samples, its own units of c, and its
    units' rows of every gate's weights (stored gate-major, [4, H, ...]). The first
    step (input x alone) starts from zero h and c, so it leaves weight_hh unused."""

    name = "lstm_cell"

    def forward(self, op, region, inputs, params, seed):
        w_ih, w_hh, b_ih, b_hh = params
        gates, units = w_ih.shape[0], w_ih.shape[1]
        pre = F.linear(inputs[0], w_ih.flatten(0, 1), (b_ih + b_hh).flatten())
        if len(inputs) == 3:
            pre = pre + F.linear(inputs[1], w_hh.flatten(0, 1))
        i, f, g, o = pre.unflatten(1, (gates, units)).unbind(1)
        c = torch.sigmoid(i) * torch.tanh(g)
        if len(inputs) == 3:
            c = c + torch.sigmoid(f) * inputs[2]
        return [torch.sigmoid(o) * torch.tanh(c), c]
