"""The ATen ops the importer maps, by overload (never by node name), each onto one of
flextui's op types through the graph builder. A handler gets the node's arguments with
its inputs resolved (flextui tensors, ``ParamRef`` for the module's weights) and returns
the op's output; ``Unmappable`` says why a variant cannot be mapped; an alias returns
its input as it is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flextui.graph.importer import views
from flextui.graph.importer.context import Context, ParamRef, Unmappable, owner
from flextui.graph.tensor import Tensor


def _tensor(value: Any, what: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise Unmappable(f"{what} is " + (views.describe(value) or
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
    def handler(ctx: Context, a: Any, b: Any, **kwargs: Any) -> Tensor:
        if kwargs.get("alpha", 1) != 1:
            raise Unmappable("alpha")
        if fn == "mul" and _number(b) != _number(a):
            return _scale(ctx, b if _number(a) else a, a if _number(a) else b)
        if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
            raise Unmappable("a scalar added or subtracted (only multiplying or dividing "
                             "by one maps)")
        if a.shape != b.shape:
            raise Unmappable(f"broadcasting {list(a.shape)} with {list(b.shape)}")
        return ctx.builder.binary(a, b, fn, name=ctx.name)
    return handler


def divide(ctx: Context, a: Any, b: Any) -> Tensor:
    if not _number(b):
        raise Unmappable("a division by a tensor (only by a number)")
    return _scale(ctx, a, 1.0 / float(b))


def _scale(ctx: Context, x: Any, factor: Any) -> Tensor:
    return ctx.builder.add("unary", [_tensor(x, "the input")],
                           {"fn": "scale", "factor": float(factor)}, ctx.name).outputs[0]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def flatten(ctx: Context, x: Any, start: int = 0, end: int = -1) -> Tensor:
    x = _tensor(x, "the input")
    if start != 1 or end not in (-1, len(x.shape) - 1):
        raise Unmappable("a flatten that does not keep the batch dim alone")
    return ctx.builder.flatten(x, name=ctx.name)


def reshape(ctx: Context, x: Any, shape: Any) -> Any:
    seen = views.view(ctx, x, shape)
    if seen is not None:
        return seen
    x = _tensor(x, "the input")
    shape = [int(s) for s in shape]
    if shape[0] != x.shape[0]:
        raise Unmappable(f"a reshape of {list(x.shape)} to {shape} changes the batch dim")
    return ctx.builder.reshape(x, shape, name=ctx.name)


def cat(ctx: Context, xs: Any, dim: int = 0) -> Tensor:
    tensors = [_tensor(x, "an input") for x in xs]
    return ctx.builder.concat(tensors, dim % len(tensors[0].shape), name=ctx.name)


def embedding(ctx: Context, weight: Any, ids: Any, *_: Any) -> Tensor:
    if not isinstance(weight, ParamRef):
        raise Unmappable("the table is computed, not a parameter")
    if isinstance(ids, views.Positions):
        ids = views.positions_input(ctx, ids)
    out = ctx.builder.embedding(_tensor(ids, "the ids"), weight.shape[0], weight.shape[1],
                                name=ctx.name, shared=owner(weight))
    return ctx.bind(out, weight=weight)


def matmul(ctx: Context, a: Any, b: Any) -> Tensor:
    return ctx.builder.matmul(_tensor(a, "the left operand"), _tensor(b, "the right operand"),
                              name=ctx.name)


def cross_entropy(ctx: Context, logits: Any, labels: Any, weight: Any = None,
                  reduction: int = 1, ignore_index: int = -100,
                  label_smoothing: float = 0.0) -> Tensor:
    if weight is not None or reduction != 1 or label_smoothing:
        raise Unmappable("class weights, a reduction other than the mean, or smoothing")
    if isinstance(logits, views.FlatBatch) and isinstance(labels, views.FlatBatch):
        logits, labels = logits.tensor, labels.tensor  # a token-level loss, [B, T]
        return ctx.builder.softmax_ce(logits, labels, name=ctx.name)
    logits = _tensor(logits, "the logits")
    # torch's classes are along dim 1: [B, C] or [B, C, d1, ...] (per-pixel)
    return ctx.builder.softmax_ce(logits, _tensor(labels, "the labels"), name=ctx.name,
                                  class_dim=1)


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
    **{f"aten.{fn}{_}.default": unary(fn) for fn in ("relu", "sigmoid", "tanh")
       for _ in ("", "_")},
    "aten.gelu.default": gelu,
    "aten.gelu_.default": gelu,
    "aten.dropout.default": dropout,
    **{f"aten.{fn}{_}.Tensor": binary(fn) for fn in ("add", "sub", "mul") for _ in ("", "_")},
    **{f"aten.div{_}.Tensor": divide for _ in ("", "_")},
    "aten.flatten.using_ints": flatten,
    "aten.transpose.int": views.transpose,
    "aten.permute.default": views.permute,
    "aten.scaled_dot_product_attention.default": views.attention,
    "aten.arange.default": views.arange,
    "aten.arange.start": views.arange,
    "aten.arange.start_step": views.arange,
    "aten.unsqueeze.default": views.unsqueeze,
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
}
