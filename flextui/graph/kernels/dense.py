"""Kernels of the dense ops: linear, embedding, matmul, layernorm, softmax_ce."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from flextui.graph.kernels.base import Kernel, register
from flextui.graph.ops.dense import class_dim


@register
class LinearKernel(Kernel):
    """A block of out-features uses the matching rows of the weight (and bias): its
    shard, or with ``rows`` its rows of the whole weight; a ``transposed`` weight is
    [in, out]."""

    name = "linear"

    def forward(self, op, region, inputs, params, seed):
        weight, bias = params[0], params[1] if len(params) > 1 else None
        rows = op.attrs.get("rows")
        if rows is not None:
            first, stop = (rows[0] + i for i in region[-1])
            weight, bias = weight[first:stop], None if bias is None else bias[first:stop]
        elif op.attrs.get("transposed"):
            weight = weight.t()
        return [F.linear(inputs[0], weight, bias)]


@register
class EmbeddingKernel(Kernel):
    """A block of the embedding dim uses those columns of the whole table; the row
    ``padding_idx`` gets no gradient, as in torch."""

    name = "embedding"

    def forward(self, op, region, inputs, params, seed):
        return [F.embedding(inputs[0], params[0], padding_idx=op.attrs.get("padding_idx"))]

    def index_bound(self, op, i):
        return op.attrs["num_embeddings"]


@register
class MatmulKernel(Kernel):
    name = "matmul"

    def forward(self, op, region, inputs, params, seed):
        return [torch.matmul(*inputs)]


@register
class LayerNormKernel(Kernel):
    """Normalisation over the whole last dim (never split), with the op's ``eps``
    (torch's 1e-5 unless it says)."""

    name = "layernorm"

    def forward(self, op, region, inputs, params, seed):
        x = inputs[0]
        eps = float(op.attrs.get("eps", 1e-5))
        return [F.layer_norm(x, (x.shape[-1],), params[0], params[1], eps=eps)]


@register
class SoftmaxCrossEntropyKernel(Kernel):
    """Outputs the probabilities; the loss is the mean cross-entropy over every label of
    the whole op, so a block's share is its summed cross-entropy over the whole op's
    label count, and the blocks' shares add up to ``F.cross_entropy`` of the whole."""

    name = "softmax_ce"

    def forward_loss(self, op, region, inputs, params, seed):
        logits, labels = inputs
        dim = class_dim(op)
        log_probs = torch.log_softmax(logits, dim=dim)
        picked = log_probs.gather(dim, labels.long().unsqueeze(dim))
        return [log_probs.exp()], -picked.sum() / math.prod(op.inputs[1].shape)

    def index_bound(self, op, i):
        return op.inputs[0].shape[class_dim(op)]
