"""Attention op types: additive (Bahdanau, for NMT) and multi-head (transformers)."""

from __future__ import annotations

from flextui.graph.dims import Dim, DimKind
from flextui.graph.ops.base import OpType, ParamSpec, register, require
from flextui.graph.region import region_volume


@register
class AdditiveAttention(OpType):
    """One decoder step of Bahdanau attention: query [B, H] attends over keys
    [B, T, H]; the output is tanh(W_out [context; query]) of shape [B, H]. Space:
    batch (sample) x hidden (parameter, splits W_out's rows); the score weights are
    replicated in every block."""

    name = "attention"
    backward_factor = 2.0

    def check(self, op):
        require(len(op.inputs) == 2, op, "takes query [B, H] and keys [B, T, H]")
        q, k = op.inputs[0].shape, op.inputs[1].shape
        require(len(q) == 2 and len(k) == 3 and k[0] == q[0] and k[2] == q[1], op,
                f"query {list(q)} and keys {list(k)} do not fit ([B, H] and [B, T, H])")

    def infer(self, op):
        return [(op.inputs[0].shape, op.inputs[0].dtype)]

    def space(self, op):
        b, h = op.outputs[0].shape
        return (Dim("sample", b, DimKind.SAMPLE), Dim("hidden", h, DimKind.PARAMETER))

    def params(self, op):
        h = op.inputs[0].shape[1]
        return [ParamSpec("w_query", (h, h), (None, None)),
                ParamSpec("w_keys", (h, h), (None, None)),
                ParamSpec("v", (h,), (None,)),
                ParamSpec("w_out", (h, 2 * h), (1, None))]

    def input_regions(self, op, region):
        t, h = op.inputs[1].shape[1:]
        return [(region[0], (0, h)), (region[0], (0, t), (0, h))]

    def flops(self, op, region):
        t, h = op.inputs[1].shape[1:]
        rows = region[0][1] - region[0][0]
        scores = rows * (2.0 * t * h * h + 2.0 * h * h + 3.0 * t * h + 2.0 * t * h)
        return scores + 2.0 * region_volume(region) * 2 * h


def heads_space(op) -> tuple[Dim, ...]:
    """Batch (sample), positions (attribute), model dim (attribute, split on head
    boundaries) of an op over heads [B, S, D]."""
    b, s, d = op.outputs[0].shape
    return (Dim("sample", b, DimKind.SAMPLE), Dim("sequence", s, DimKind.ATTRIBUTE),
            Dim("heads", d, DimKind.ATTRIBUTE, splits=op.attrs["heads"]))


@register
class MultiHeadAttention(OpType):
    """Scaled dot-product attention of projected q [B, S, D] over k and v [B, T, D] (T
    = S for self-attention, the other sequence's length for cross-attention) with
    ``heads`` heads; ``causal``: query i sees keys 0..i (torch's ``is_causal``);
    ``scale`` (1/sqrt(head dim) unless given); ``buckets``: a learned relative position
    bias (T5's), the parameter ``relative_bias`` [num_buckets, heads] looked up by the
    bucket of each distance key - query (from -(S - 1) to T - 1) and added to the
    scores. The projections are separate linear ops. Space: batch (sample), query
    positions (attribute), model dim (attribute, split on head boundaries)."""

    name = "multihead_attention"
    backward_factor = 2.0

    def check(self, op):
        require(len(op.inputs) == 3, op, "takes q, k and v")
        q, k, v = (t.shape for t in op.inputs)
        require(len(q) == 3 and k == v and len(k) == 3 and (q[0], q[2]) == (k[0], k[2]), op,
                f"q must be [B, S, D] and k, v one [B, T, D] shape, got {list(q)}, "
                f"{list(k)}, {list(v)}")
        require(q[2] % op.attrs["heads"] == 0, op,
                f"model dim {q[2]} is not divisible by {op.attrs['heads']} heads")
        buckets = op.attrs.get("buckets")
        require(buckets is None or (len(buckets) == q[1] + k[1] - 1 and all(
            type(b) is int and 0 <= b < op.attrs["num_buckets"] for b in buckets)), op,
                "buckets must be one bucket of the table per distance key - query")

    def params(self, op):
        buckets = op.attrs.get("buckets")
        if buckets is None:
            return []
        return [ParamSpec("relative_bias", (op.attrs["num_buckets"], op.attrs["heads"]),
                          (None, 2))]

    def infer(self, op):
        return [(op.inputs[0].shape, op.inputs[0].dtype)]

    def space(self, op):
        return heads_space(op)

    def input_regions(self, op, region):
        kv = (region[0], (0, op.inputs[1].shape[1]), region[2])
        return [region, kv, kv]

    def flops(self, op, region):
        keys = op.inputs[1].shape[1]
        heads_in_block = (region[2][1] - region[2][0]) * op.attrs["heads"] // op.inputs[0].shape[2]
        rows = (region[0][1] - region[0][0]) * (region[1][1] - region[1][0])
        bias = 1.0 if "buckets" in op.attrs else 0.0   # a relative position bias added
        return 4.0 * region_volume(region) * keys + \
            (5.0 + bias) * rows * keys * heads_in_block


@register
class Rotary(OpType):
    """Rotary position embedding (RoPE, as Llama's) of x [B, S, D] split into
    ``heads`` heads: each head's halves (a, b) become (a cos - b sin, b cos + a sin),
    with the angle of position p and pair i = p * inv_freq[i], times ``scaling``.
    Positions are global, so a block of positions is rotated as the whole is. Space:
    batch (sample), positions (attribute), model dim (attribute, on head boundaries)."""

    name = "rotary"

    def check(self, op):
        require(len(op.inputs) == 1 and op.inputs[0].rank == 3, op, "takes x [B, S, D]")
        width, heads = op.inputs[0].shape[2], op.attrs["heads"]
        require(width % heads == 0, op, f"model dim {width} is not divisible by {heads} heads")
        require(2 * len(op.attrs["inv_freq"]) == width // heads, op,
                "inv_freq must have one frequency per pair of a head's dims")

    def infer(self, op):
        return [(op.inputs[0].shape, op.inputs[0].dtype)]

    def space(self, op):
        return heads_space(op)

    def input_regions(self, op, region):
        return [region]

    def flops(self, op, region):
        return 6.0 * region_volume(region)
