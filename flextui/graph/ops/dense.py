"""Dense op types: linear, embedding, matmul, layernorm, softmax with cross-entropy."""

from __future__ import annotations

from flextui.graph.dims import Dim, DimKind
from flextui.graph.ops.base import OpType, ParamSpec, elementwise_space, register, require
from flextui.graph.region import region_volume


def _feature_space(shape, last_kind: DimKind | None) -> tuple[Dim, ...]:
    """Dim 0 sample, middle dims attribute, the last dim of kind ``last_kind``."""
    dims = elementwise_space(shape[:-1])
    return dims + (Dim("channel", shape[-1], last_kind),)


@register
class Linear(OpType):
    """y = x W^T + b over the last dim. Table 2 (matrix multiplication): sample;
    out-channel parameter; any middle dims (sequence) are attributes. With
    ``transposed`` the weight is stored [in, out] (GPT-2's Conv1D: y = x W + b). With
    ``rows`` = [first, total] the weight (and bias) has ``total`` rows of which the op
    uses ``out_features`` from ``first`` (the query part of nn.MultiheadAttention's
    packed projection); every block then holds the whole weight."""

    name = "linear"
    backward_factor = 2.0

    def check(self, op):
        require(len(op.inputs) == 1 and op.inputs[0].rank >= 2, op,
                "expects one input of rank >= 2 (batch, ..., features)")
        rows = op.attrs.get("rows")
        require(rows is None or (len(rows) == 2 and 0 <= rows[0] and
                                 rows[0] + op.attrs["out_features"] <= rows[1]), op,
                f"rows {rows!r:.40} must be [first, total] holding the op's out_features")
        require(rows is None or not op.attrs.get("transposed"), op,
                "rows of a transposed weight")

    def infer(self, op):
        shape = op.inputs[0].shape
        return [(shape[:-1] + (op.attrs["out_features"],), op.inputs[0].dtype)]

    def space(self, op):
        return _feature_space(op.outputs[0].shape, DimKind.PARAMETER)

    def params(self, op):
        last = op.inputs[0].rank - 1
        out, inp = op.attrs["out_features"], op.inputs[0].shape[-1]
        rows = op.attrs.get("rows")
        if rows is not None:
            specs = [ParamSpec("weight", (rows[1], inp), (None, None))]
            return specs + [ParamSpec("bias", (rows[1],), (None,))] if op.attrs["bias"] \
                else specs
        specs = [ParamSpec("weight", (inp, out), (None, last)) if op.attrs.get("transposed")
                 else ParamSpec("weight", (out, inp), (last, None))]
        if op.attrs["bias"]:
            specs.append(ParamSpec("bias", (out,), (last,)))
        return specs

    def input_regions(self, op, region):
        return [region[:-1] + ((0, op.inputs[0].shape[-1]),)]

    def flops(self, op, region):
        return 2.0 * region_volume(region) * op.inputs[0].shape[-1]


@register
class Embedding(OpType):
    """Table lookup of integer ids; the embedding dim is a parameter dim. The row
    ``padding_idx``, if given, gets no gradient (torch's)."""

    name = "embedding"

    def check(self, op):
        require(len(op.inputs) == 1 and op.inputs[0].dtype.startswith("int"), op,
                "expects one integer tensor of ids")
        pad = op.attrs.get("padding_idx")
        require(pad is None or (type(pad) is int and 0 <= pad < op.attrs["num_embeddings"]),
                op, f"padding_idx {pad!r:.20} is not a row of the table")

    def infer(self, op):
        return [(op.inputs[0].shape + (op.attrs["dim"],), "float32")]

    def space(self, op):
        return _feature_space(op.outputs[0].shape, DimKind.PARAMETER)

    def params(self, op):
        last = op.inputs[0].rank
        return [ParamSpec("weight", (op.attrs["num_embeddings"], op.attrs["dim"]), (None, last))]

    def input_regions(self, op, region):
        return [region[:-1]]

    def flops(self, op, region):
        return float(region_volume(region))


@register
class Matmul(OpType):
    """Batched matrix product A[..., M, K] @ B[..., K, N]; no parameters, so every
    output dim but K's absence is an attribute (dim 0 the sample)."""

    name = "matmul"
    backward_factor = 2.0

    def check(self, op):
        require(len(op.inputs) == 2, op, "takes two inputs")
        a, b = op.inputs[0].shape, op.inputs[1].shape
        require(len(a) == len(b) >= 2 and a[:-2] == b[:-2] and a[-1] == b[-2], op,
                f"shapes {a} and {b} do not multiply "
                "(same batch dims, A[..., M, K] @ B[..., K, N])")

    def infer(self, op):
        a, b = op.inputs[0].shape, op.inputs[1].shape
        return [(a[:-1] + (b[-1],), op.inputs[0].dtype)]

    def input_regions(self, op, region):
        k = op.inputs[0].shape[-1]
        return [region[:-1] + ((0, k),), region[:-2] + ((0, k), region[-1])]

    def flops(self, op, region):
        return 2.0 * region_volume(region) * op.inputs[0].shape[-1]


@register
class LayerNorm(OpType):
    """Normalise over the last dim; its weight and bias are replicated in every block."""

    name = "layernorm"
    backward_factor = 2.0

    def infer(self, op):
        return [(op.inputs[0].shape, op.inputs[0].dtype)]

    def space(self, op):
        return _feature_space(op.outputs[0].shape, None)

    def params(self, op):
        d = op.inputs[0].shape[-1]
        return [ParamSpec("weight", (d,), (None,)), ParamSpec("bias", (d,), (None,))]

    def input_regions(self, op, region):
        return [region]

    def flops(self, op, region):
        return 8.0 * region_volume(region)


@register
class SoftmaxCrossEntropy(OpType):
    """Softmax over the class dim with a cross-entropy loss against integer labels; the
    output is the probabilities. The class dim is the last, or with ``attrs["class_dim"]
    == 1`` the second, torch's convention for logits ``[B, C, d1, ...]`` and labels
    ``[B, d1, ...]`` (per-pixel classes: the d's are attribute dims). It is not
    parallel."""

    name = "softmax_ce"

    def check(self, op):
        require(len(op.inputs) == 2, op, "takes logits and labels")
        logits, labels = op.inputs
        require(op.attrs.get("class_dim", -1) in (-1, 1) and len(logits.shape) >= 2, op,
                "the class dim is the last or (torch's convention) the second of the logits")
        shape = labels_shape(logits.shape, class_dim(op))
        require(labels.shape == shape and labels.dtype.startswith("int"), op,
                f"labels must be integers of shape {list(shape)} (the logits "
                f"{list(logits.shape)} without their class dim), got "
                f"{labels.dtype}{list(labels.shape)}")

    def infer(self, op):
        return [(op.inputs[0].shape, op.inputs[0].dtype)]

    def space(self, op):
        shape = op.outputs[0].shape
        if class_dim(op) == 1:
            return elementwise_space(shape, fixed=(1,))
        return _feature_space(shape, None)

    def input_regions(self, op, region):
        c = class_dim(op)
        return [region, region[:c] + region[c + 1:] if c >= 0 else region[:c]]

    def flops(self, op, region):
        return 5.0 * region_volume(region)


def class_dim(op) -> int:
    """The dim of a softmax_ce op's logits that holds the classes (1, or -1: the last)."""
    return int(op.attrs.get("class_dim", -1))


def labels_shape(logits: tuple[int, ...], dim: int) -> tuple[int, ...]:
    """The shape of the labels of ``logits`` whose classes are along ``dim``."""
    dim %= len(logits)
    return logits[:dim] + logits[dim + 1:]
