"""The ATen ops the importer maps, by overload (never by node name), each onto one of
flextui's op types through the graph builder. A handler gets the node's arguments with
its inputs resolved (flextui tensors, ``ParamRef`` for the module's weights) and returns
the op's output; ``Unmappable`` says why a variant cannot be mapped; an alias returns
its input as it is."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from flextui.graph.importer import constants, relbias, rotary, views
from flextui.graph.importer.constants import Constant
from flextui.graph.importer.context import Context, ParamRef, Unmappable, owner
from flextui.graph.tensor import Tensor


def _tensor(value: Any, what: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise Unmappable(f"{what} is " + (views.describe(value) or rotary.describe(value) or
                                          relbias.describe(value) or
                                          "not an activation (a constant or a weight used "
                                          "as data)"))
    return value


def _pair(value: Any) -> tuple[int, int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return (int(values[0]), int(values[-1]))


def conv2d(ctx: Context, x: Any, weight: Any, bias: Any = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    if not isinstance(weight, ParamRef):
        raise Unmappable("the weight is computed, not a parameter")
    if groups != 1:
        raise Unmappable(f"grouped convolution (groups={groups})")
    if isinstance(padding, str):
        raise Unmappable(f"padding={padding!r}")
    out = ctx.builder.conv2d(_tensor(x, "the input"), weight.shape[0], _pair(weight.shape[2:]),
                             _pair(stride), _pair(padding), _pair(dilation),
                             bias=bias is not None, name=ctx.name, shared=owner(weight))
    return ctx.bind(out, weight=weight, bias=bias)


def linear(ctx: Context, x: Any, weight: Any, bias: Any = None) -> Tensor:
    if not isinstance(weight, ParamRef):
        raise Unmappable("the weight is computed, not a parameter")
    out = ctx.builder.linear(_tensor(x, "the input"), weight.shape[0], bias=bias is not None,
                             name=ctx.name, shared=owner(weight))
    return ctx.bind(out, weight=weight, bias=bias)


def addmm(ctx: Context, bias: Any, x: Any, weight: Any, *, beta: Any = 1,
          alpha: Any = 1) -> Any:
    """``bias + x @ weight``: a linear layer whose weight is [in, out] (GPT-2's Conv1D),
    on a [rows, in] activation or one whose batch is merged for it ([B*S, in])."""
    if not (isinstance(weight, ParamRef) and isinstance(bias, ParamRef)) or beta != 1 \
            or alpha != 1:
        raise Unmappable("a product with a computed matrix, or beta/alpha other than 1")
    flat = isinstance(x, views.FlatBatch)
    x = _tensor(x.tensor if flat else x, "the input")
    out = ctx.builder.linear(x, weight.shape[1], name=ctx.name, shared=owner(weight),
                             transposed=True)
    out = ctx.bind(out, weight=weight, bias=bias)
    return views.FlatBatch(out) if flat else out


def max_pool2d(ctx: Context, x: Any, kernel: Any, stride: Any = (), padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False) -> Tensor:
    if ceil_mode or _pair(dilation) != (1, 1):
        raise Unmappable("ceil_mode or dilation")
    return ctx.builder.pool2d(_tensor(x, "the input"), _pair(kernel),
                              _pair(stride) if stride else None, _pair(padding), "max",
                              name=ctx.name)


def avg_pool2d(ctx: Context, x: Any, kernel: Any, stride: Any = (), padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: Any = None) -> Tensor:
    if ceil_mode or divisor_override is not None:
        raise Unmappable("ceil_mode or divisor_override")
    return ctx.builder.pool2d(_tensor(x, "the input"), _pair(kernel),
                              _pair(stride) if stride else None, _pair(padding), "avg",
                              name=ctx.name)


def adaptive_avg_pool2d(ctx: Context, x: Any, output_size: Any) -> Tensor:
    return ctx.builder.adaptive_pool2d(_tensor(x, "the input"), _pair(output_size), "avg",
                                       name=ctx.name)


def batch_norm(ctx: Context, x: Any, weight: Any = None, bias: Any = None,
               mean: Any = None, var: Any = None, training: bool = True,
               momentum: float = 0.1, eps: float = 1e-5, *_: Any) -> Tensor:
    if not (isinstance(weight, ParamRef) and isinstance(bias, ParamRef)):
        raise Unmappable("batch norm without its affine weight and bias")
    return _norm(ctx, "batchnorm", _tensor(x, "the input"), eps, weight, bias)


def layer_norm(ctx: Context, x: Any, shape: Any, weight: Any = None, bias: Any = None,
               eps: float = 1e-5, *_: Any) -> Tensor:
    x = _tensor(x, "the input")
    if list(shape) != [x.shape[-1]]:
        raise Unmappable(f"normalised over {list(shape)}, not the last dim")
    if not (isinstance(weight, ParamRef) and isinstance(bias, ParamRef)):
        raise Unmappable("layer norm without its weight and bias")
    return _norm(ctx, "layernorm", x, eps, weight, bias)


def _norm(ctx: Context, kind: str, x: Tensor, eps: float, weight: ParamRef,
          bias: ParamRef) -> Tensor:
    attrs = {} if eps == 1e-5 else {"eps": float(eps)}
    out = ctx.builder.add(kind, [x], attrs, ctx.name, shared=owner(weight)).outputs[0]
    return ctx.bind(out, weight=weight, bias=bias)


def unary(fn: str) -> Callable[..., Tensor]:
    def handler(ctx: Context, x: Any, *_: Any, **__: Any) -> Tensor:
        return ctx.builder.unary(_tensor(x, "the input"), fn, name=ctx.name)
    return handler


def _numbered(ctx: Context, x: Any, fn: str, **number: float) -> Tensor:
    """A unary function that takes a number (``ops.basic.UNARY_NUMBERS``)."""
    return ctx.builder.add("unary", [_tensor(x, "the input")],
                           {"fn": fn, **{k: float(v) for k, v in number.items()}},
                           ctx.name).outputs[0]


def power(ctx: Context, x: Any, exponent: Any) -> Tensor:
    if not _number(exponent):
        raise Unmappable("a power by a tensor (only by a number)")
    return _numbered(ctx, x, "pow", exponent=exponent)


def negative(ctx: Context, x: Any) -> Any:
    if isinstance(x, rotary.Half):
        return rotary.negate(x)
    return ctx.builder.unary(_tensor(x, "the input"), "neg", name=ctx.name)


def mean(ctx: Context, x: Any, dims: Any, keepdim: bool = False, *,
         dtype: Any = None) -> Tensor:
    """A mean over the last dim (an RMSNorm's), kept as a dim of size 1 or dropped."""
    x = _tensor(x, "the input")
    if dtype is not None or [int(d) % len(x.shape) for d in dims] != [len(x.shape) - 1] \
            or len(x.shape) < 2:
        raise Unmappable("a mean over other than the last dim")
    out = ctx.builder.add("mean", [x], {}, ctx.name).outputs[0]
    return out if keepdim else ctx.builder.reshape(out, list(x.shape[:-1]),
                                                   name=ctx.free_name(f"{ctx.name}.squeeze"))


def dropout(ctx: Context, x: Any, p: float = 0.5, train: bool = True) -> Tensor:
    """Dropout with the module's probability (none when not training, or p is 0)."""
    x = _tensor(x, "the input")
    if not train or not p:
        return ctx.builder.unary(x, "identity", name=ctx.name)
    return ctx.builder.add("unary", [x], {"fn": "dropout", "p": float(p)}, ctx.name).outputs[0]


def gelu(ctx: Context, x: Any, approximate: str = "none") -> Tensor:
    attrs = {"fn": "gelu"} if approximate == "none" else {"fn": "gelu",
                                                           "approximate": approximate}
    return ctx.builder.add("unary", [_tensor(x, "the input")], attrs, ctx.name).outputs[0]


def binary(fn: str) -> Callable[..., Tensor]:
    def handler(ctx: Context, a: Any, b: Any, **kwargs: Any) -> Any:
        if kwargs.get("alpha", 1) != 1:
            raise Unmappable("alpha")
        pieces = _rotary_piece(ctx, fn, a, b)
        if pieces is not None:
            return pieces
        if _number(a) or _number(b):
            return _with_number(ctx, fn, a, b)
        if fn == "mul" and isinstance(a, ParamRef) != isinstance(b, ParamRef):
            return _channel_mul(ctx, *((a, b) if isinstance(a, ParamRef) else (b, a)))
        a, b = (_parameter_data(ctx, v) if isinstance(v, ParamRef) else v for v in (a, b))
        a, b = _tensor(a, "an operand"), _tensor(b, "an operand")
        if len(a.shape) != len(b.shape) or \
                not all(x == y or 1 in (x, y) for x, y in zip(a.shape, b.shape)):
            raise Unmappable(f"broadcasting {list(a.shape)} with {list(b.shape)}")
        return ctx.builder.binary(a, b, fn, name=ctx.name)
    return handler


def _rotary_piece(ctx: Context, fn: str, a: Any, b: Any) -> Any:
    """The pieces of a rotary position embedding: heads (or their turned form) times
    a constant table, and the sum of two such; None for anything else."""
    if fn == "mul" and isinstance(b, Constant) and isinstance(a, (views.Heads, rotary.Turned)):
        return rotary.times(a, b)
    if fn == "mul" and isinstance(a, Constant) and isinstance(b, (views.Heads, rotary.Turned)):
        return rotary.times(b, a)
    if fn == "add" and (isinstance(a, rotary.Times) or isinstance(b, rotary.Times)):
        return rotary.join(ctx, a, b)
    return None


def _with_number(ctx: Context, fn: str, a: Any, b: Any) -> Tensor:
    """An activation times, plus or minus a number (or a number minus it)."""
    number, x = (a, b) if _number(a) else (b, a)
    if _number(x):
        raise Unmappable("arithmetic on numbers alone")
    if fn == "mul":
        return _scale(ctx, x, number)
    if fn == "add" or _number(b):
        return _numbered(ctx, x, "shift", offset=number if fn == "add" else -number)
    negated = ctx.builder.unary(_tensor(x, "the operand"), "neg",
                                name=ctx.free_name(f"{ctx.name}.neg"))
    return _numbered(ctx, negated, "shift", offset=number)


def _channel_mul(ctx: Context, weight: ParamRef, x: Any) -> Tensor:
    """An activation times a weight of one value per channel (an RMSNorm's scale)."""
    x = _tensor(x, "the input")
    if weight.shape != (x.shape[-1],):
        raise Unmappable(f"a weight of shape {list(weight.shape)} multiplying "
                         f"{list(x.shape)} (only one value per channel of the last dim)")
    out = ctx.builder.add("channel_mul", [x], {}, ctx.name, shared=owner(weight)).outputs[0]
    return ctx.bind(out, weight=weight)


def _parameter_data(ctx: Context, weight: ParamRef) -> Tensor:
    """A weight read as data (ViT's class token, learned positions added to the
    embeddings): a parameter op, the weight broadcast over the batch."""
    batch = int(ctx.builder.meta["batch_size"])
    attrs = {"shape": list(weight.shape), "batch": batch,
             "leading_one": len(weight.shape) > 1 and weight.shape[0] == 1}
    out = ctx.builder.add("parameter", [], attrs, ctx.free_name(f"{ctx.name}.{weight.name}"),
                          shared=weight.name).outputs[0]
    return ctx.bind(out, weight=weight)


def divide(ctx: Context, a: Any, b: Any) -> Tensor:
    if not _number(b):
        raise Unmappable("a division by a tensor (only by a number)")
    return _scale(ctx, a, 1.0 / float(b))


def _scale(ctx: Context, x: Any, factor: Any) -> Tensor:
    return ctx.builder.add("unary", [_tensor(x, "the input")],
                           {"fn": "scale", "factor": float(factor)}, ctx.name).outputs[0]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def flatten(ctx: Context, x: Any, start: int = 0, end: int = -1) -> Any:
    """A flatten that keeps the batch dim (``flatten(1)``, ``flatten(2)``), or merges
    it into the next for a token-level loss."""
    x = _tensor(x, "the input")
    rank = len(x.shape)
    start, end = start % rank, end % rank
    if start == 0:
        if end == 1:
            return views.FlatBatch(x)
        raise Unmappable("a flatten that merges the batch dim with more than the next")
    if start == end:
        return x
    shape = [*x.shape[:start], math.prod(x.shape[start:end + 1]), *x.shape[end + 1:]]
    return ctx.builder.reshape(x, shape, name=ctx.name)


def reshape(ctx: Context, x: Any, shape: Any) -> Any:
    seen = views.view(ctx, x, shape)
    if seen is not None:
        return seen
    x = _tensor(x, "the input")
    shape = views.resolved(shape, x.shape)
    if shape == list(x.shape):
        return x
    if shape[0] != x.shape[0]:
        raise Unmappable(f"a reshape of {list(x.shape)} to {shape} changes the batch dim")
    return ctx.builder.reshape(x, shape, name=ctx.name)


def expand(ctx: Context, x: Any, shape: Any, *, implicit: bool = False) -> Tensor:
    """An expand that changes nothing, or broadcasts a weight over the batch."""
    tensor = _tensor(_parameter_data(ctx, x) if isinstance(x, ParamRef) else x, "the input")
    if [s if s != -1 else d for s, d in zip(shape, tensor.shape)] != list(tensor.shape):
        raise Unmappable(f"an expand of {list(tensor.shape)} to {list(shape)}")
    return tensor


def cast(ctx: Context, x: Any, *args: Any, **kwargs: Any) -> Any:
    """A change of dtype within floats (flextui runs a graph in one float dtype) or
    within integers, or of device: the value as it is."""
    wanted = [v for v in (*args, *kwargs.values()) if isinstance(v, torch.dtype)]
    if not isinstance(x, Tensor):
        return alias(ctx, x)
    if wanted and wanted[0].is_floating_point != x.dtype.startswith("float"):
        raise Unmappable(f"a cast of {x.dtype} to {wanted[0]}")
    return x


def slice_(ctx: Context, x: Any, dim: int = 0, start: Any = None, end: Any = None,
           step: int = 1) -> Any:
    """A range of a non-batch axis (a slice op); half of each attention head (a rotary
    embedding's); the labels moved one place left (a causal LM's shift)."""
    if isinstance(x, views.Heads):
        return rotary.half(x, dim, start or 0, end if end is not None else 1 << 62)
    if isinstance(x, views.Padded):
        return views.shifted(x, dim, start, end)
    x = _tensor(x, "the input")
    axis = dim % len(x.shape)
    size = x.shape[axis]
    first = max(0, min(size, (start or 0) + (size if (start or 0) < 0 else 0)))
    stop = size if end is None else max(0, min(size, end + (size if end < 0 else 0)))
    if (first, stop) == (0, size) and step == 1:
        return x
    if axis == 0 or step != 1:
        raise Unmappable("a slice of the batch dim, or with a step")
    return ctx.builder.add("slice", [x], {"axis": axis, "start": first, "stop": stop},
                           ctx.name).outputs[0]


def select(ctx: Context, x: Any, dim: int, index: int) -> Tensor:
    """One element of a non-batch axis, the axis dropped (BERT's ``x[:, 0]``)."""
    x = _tensor(x, "the input")
    axis = dim % len(x.shape)
    if axis == 0:
        raise Unmappable("indexing the batch dim")
    first = index % x.shape[axis]
    return ctx.builder.add("slice", [x], {"axis": axis, "start": first, "stop": first + 1,
                                          "squeeze": True}, ctx.name).outputs[0]


def pad(ctx: Context, x: Any, widths: Any, mode: str = "constant",
        value: Any = None) -> views.Padded:
    """The labels padded at the end of the sequence, to be shifted (a causal LM's
    loss); flextui takes no other pad yet."""
    x = _tensor(x, "the input")
    if mode != "constant" or len(widths) != 2 or widths[0] != 0 or len(x.shape) != 2 \
            or not x.dtype.startswith("int"):
        raise Unmappable("a pad other than of integer labels at the end of the sequence")
    return views.Padded(x, int(widths[1]), int(value or 0))


def cat(ctx: Context, xs: Any, dim: int = 0) -> Any:
    """A concat (a weight read as data among its inputs: ViT's class token); empty
    constants are left out (a key/value cache that starts empty: use_cache)."""
    xs = [x for x in xs if not (isinstance(x, Constant) and x.tensor is not None
                                and x.tensor.numel() == 0)]
    if any(isinstance(x, rotary.Half) for x in xs):
        return rotary.turn(list(xs))
    if len(xs) == 1:
        return xs[0]
    tensors = [_tensor(_parameter_data(ctx, x) if isinstance(x, ParamRef) else x, "an input")
               for x in xs]
    return ctx.builder.concat(tensors, dim % len(tensors[0].shape), name=ctx.name)


def embedding(ctx: Context, weight: Any, ids: Any, padding_idx: int = -1,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Any:
    if not isinstance(weight, ParamRef):
        raise Unmappable("the table is computed, not a parameter")
    if scale_grad_by_freq or sparse:
        raise Unmappable("scale_grad_by_freq or sparse")
    if isinstance(ids, Constant):
        if ids.tensor is not None and ids.tensor.dim() == 2 and not _fills(ids):
            return relbias.lookup(weight, ids)   # T5's buckets of relative positions
        ids = views.fill_input(ctx, ids)
    out = ctx.builder.embedding(_tensor(ids, "the ids"), weight.shape[0], weight.shape[1],
                                name=ctx.name, shared=owner(weight),
                                padding_idx=None if padding_idx < 0 else padding_idx)
    return ctx.bind(out, weight=weight)


def _fills(ids: Constant) -> bool:
    try:
        constants.id_fill(ids)
    except Unmappable:
        return False
    return True


def permute(ctx: Context, x: Any, dims: Any) -> Any:
    if isinstance(x, relbias.PositionBias):
        return relbias.permute(x, list(dims))
    return views.permute(ctx, x, dims)


def unsqueeze(ctx: Context, x: Any, dim: int) -> Any:
    if isinstance(x, relbias.PositionBias):
        return relbias.unsqueeze(x, dim)
    raise Unmappable("an unsqueeze of an activation")


def where(ctx: Context, condition: Any, x: Any, other: Any) -> Any:
    return relbias.where(condition, x, other)


def matmul(ctx: Context, a: Any, b: Any) -> Tensor:
    return ctx.builder.matmul(_tensor(a, "the left operand"), _tensor(b, "the right operand"),
                              name=ctx.name)


def cross_entropy(ctx: Context, logits: Any, labels: Any, weight: Any = None,
                  reduction: int = 1, ignore_index: int = -100,
                  label_smoothing: float = 0.0) -> Tensor:
    if weight is not None or reduction != 1 or label_smoothing:
        raise Unmappable("class weights, a reduction other than the mean, or smoothing")
    token_level = isinstance(logits, views.FlatBatch) and isinstance(labels, views.FlatBatch)
    if token_level:
        logits, labels = logits.tensor, labels.tensor  # a token-level loss, [B, T]
    if isinstance(labels, views.Shifted):
        logits, labels = views.unshift(ctx, logits, labels, ignore_index)
        token_level = True
    # a token-level loss has its classes last; torch's own convention is along dim 1,
    # [B, C] or [B, C, d1, ...] (per-pixel)
    return ctx.builder.softmax_ce(_tensor(logits, "the logits"), _tensor(labels, "the labels"),
                                  name=ctx.name, class_dim=-1 if token_level else 1)


def split(ctx: Context, x: Any, size: Any, dim: int = 0) -> list[Tensor]:
    x = _tensor(x, "the input")
    axis = dim % len(x.shape)
    total = x.shape[axis]
    sizes = [int(s) for s in size] if isinstance(size, (list, tuple)) else \
        [min(int(size), total - i) for i in range(0, total, int(size))]
    return ctx.builder.split(x, sizes, axis, name=ctx.name)


def chunk(ctx: Context, x: Any, chunks: int, dim: int = 0) -> list[Tensor]:
    x = _tensor(x, "the input")
    total = x.shape[dim % len(x.shape)]
    return split(ctx, x, -(-total // chunks), dim)


def getitem(ctx: Context, values: Any, index: int) -> Any:
    if not isinstance(values, (list, tuple)):
        raise Unmappable("indexing an activation")
    return values[index]


def alias(ctx: Context, x: Any, *_: Any, **__: Any) -> Any:
    return x


HANDLERS: dict[str, Callable[..., Any]] = {
    "aten.conv2d.default": conv2d,
    "aten.linear.default": linear,
    "aten.max_pool2d.default": max_pool2d,
    "aten.avg_pool2d.default": avg_pool2d,
    "aten.adaptive_avg_pool2d.default": adaptive_avg_pool2d,
    "aten.batch_norm.default": batch_norm,
    "aten.layer_norm.default": layer_norm,
    **{f"aten.{fn}{_}.default": unary(fn) for fn in ("relu", "sigmoid", "tanh", "silu",
                                                      "rsqrt") for _ in ("", "_")},
    "aten.neg.default": negative,
    "aten.pow.Tensor_Scalar": power,
    "aten.mean.dim": mean,
    "aten.addmm.default": addmm,
    "aten.expand.default": expand,
    "aten.slice.Tensor": slice_,
    "aten.select.int": select,
    "aten.pad.default": pad,
    **{f"aten.to.{v}": cast for v in ("dtype", "dtype_layout", "device")},
    "aten.gelu.default": gelu,
    "aten.gelu_.default": gelu,
    "aten.dropout.default": dropout,
    **{f"aten.{fn}{_}.Tensor": binary(fn) for fn in ("add", "sub", "mul") for _ in ("", "_")},
    **{f"aten.div{_}.Tensor": divide for _ in ("", "_")},
    "aten.transpose.int": views.transpose,
    "aten.permute.default": permute,
    "aten.unsqueeze.default": unsqueeze,
    "aten.where.ScalarOther": where,
    "aten.scaled_dot_product_attention.default": views.attention,
    "aten.view.default": reshape,
    "aten.reshape.default": reshape,
    "aten.cat.default": cat,
    "aten.split.Tensor": split,
    "aten.split_with_sizes.default": split,
    "aten.chunk.default": chunk,
    "getitem": getitem,
    "aten.embedding.default": embedding,
    "aten.matmul.default": matmul,
    "aten.cross_entropy_loss.default": cross_entropy,
    **{f"aten.{fn}.default": alias for fn in ("contiguous", "clone", "detach", "alias")},
    "aten.flatten.using_ints": flatten,
}
