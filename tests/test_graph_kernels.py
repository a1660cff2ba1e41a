"""Block kernels: every op type has one, and computing every task's block of a small op
separately, for every valid parallel config, assembles to the whole op computed with
plain torch: outputs, loss and gradients (overlapping halo and replica gradients
summed)."""

import math
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

from flextui.errors import GraphError
from flextui.graph import OP_TYPES, GraphBuilder, Op, Region, full_region
from flextui.graph.kernels import (
    KERNELS,
    backward_block,
    block_tensors,
    forward_block,
    kernel_for,
    loss_block,
    operand_regions,
)
from flextui.strategy import valid_configs
from helpers import HANG_S

DTYPE = torch.float64
Ref = Callable[[tuple[int, ...], list, list], tuple[list, object]]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: intra-op threads only contend (40x slower on a busy 2-core box)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@dataclass
class Case:
    """An op built by ``build`` (which returns its output tensor or tensors) and the whole
    op in plain torch: ``ref(degrees, inputs, params) -> (outputs, loss or None)``."""

    name: str
    build: Callable
    ref: Ref
    devices: int = 4
    #: the inputs' values must be positive (rsqrt)
    positive: bool = False

    def op(self) -> Op:
        out = self.build(GraphBuilder(self.name))
        return (out[0] if isinstance(out, (list, tuple)) else out).producer


def plain(fn: Callable) -> Ref:
    """A reference with one output and no loss, from a function of inputs and params."""
    return lambda degrees, xs, ps: ([fn(*xs, *ps)], None)


def image(g, shape=(2, 3, 8, 8)):
    """An NCHW input."""
    return g.input(shape)


def additive_attention(q, keys, w_q, w_k, v, w_out):
    hidden = torch.tanh(torch.einsum("bi,oi->bo", q, w_q)[:, None]
                        + torch.einsum("bti,oi->bto", keys, w_k))
    context = torch.einsum("bt,bth->bh", torch.einsum("bth,h->bt", hidden, v).softmax(1), keys)
    return torch.tanh(torch.cat([context, q], 1) @ w_out.T)


def attention_heads(heads: int, causal: bool) -> Ref:
    def ref(degrees, xs, ps):
        q, k, v = (t.unflatten(2, (heads, -1)).transpose(1, 2) for t in xs)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            rows, keys = scores.shape[-2:]
            hidden = torch.ones(rows, keys, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(hidden, -math.inf)
        return [(scores.softmax(-1) @ v).transpose(1, 2).flatten(2)], None
    return ref


def lstm_cell(degrees, xs, ps):
    """torch's LSTM cell on the gate-major weights; the first step starts from zeros."""
    w_ih, w_hh, b_ih, b_hh = ps
    x, *state = xs
    state = state or [x.new_zeros(x.shape[0], w_hh.shape[2])] * 2
    return list(torch.lstm_cell(x, state, w_ih.flatten(0, 1), w_hh.flatten(0, 1),
                                b_ih.flatten(), b_hh.flatten())), None


def batchnorm_per_sample_block(degrees, xs, ps):
    """What the op type specifies: statistics of each sample block, per channel (a block
    of one value per channel normalises to the bias)."""
    weight, bias = (p.view(-1, *[1] * (xs[0].dim() - 2)) for p in ps)
    blocks = []
    for x in xs[0].chunk(degrees[0]):
        dims = [0, *range(2, x.dim())]
        mean, var = x.mean(dims, keepdim=True), x.var(dims, unbiased=False, keepdim=True)
        blocks.append((x - mean) / torch.sqrt(var + 1e-5) * weight + bias)
    return [torch.cat(blocks)], None


def softmax_ce(degrees, xs, ps):
    logits, labels = xs
    return [logits.softmax(-1)], F.cross_entropy(logits.flatten(0, -2), labels.flatten())


def softmax_ce_per_pixel(degrees, xs, ps):
    """torch's own convention: logits [B, C, H, W], labels [B, H, W]."""
    logits, labels = xs
    return [logits.softmax(1)], F.cross_entropy(logits, labels)


UNARY = {"relu": F.relu, "gelu": F.gelu, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
         "identity": lambda x: x, "silu": F.silu, "neg": torch.neg}
#: unary functions of a number, with their reference
NUMBERED = {"shift": ({"offset": 0.5}, lambda x: x + 0.5),
            "pow": ({"exponent": 3.0}, lambda x: x ** 3),
            "scale": ({"factor": -2.0}, lambda x: x * -2)}


def rotary(degrees, xs, ps):
    """Llama's apply_rotary_pos_emb on heads [B, h, S, d], tables from inv_freq."""
    (x,) = xs
    q = x.unflatten(2, (2, -1)).transpose(1, 2)
    freqs = torch.outer(torch.arange(x.shape[1], dtype=x.dtype), ROPE_FREQ.to(x.dtype))
    emb = torch.cat([freqs, freqs], -1)
    half = q.shape[-1] // 2
    turned = torch.cat([-q[..., half:], q[..., :half]], -1)
    out = q * emb.cos() * 0.5 + turned * emb.sin() * 0.5
    return [out.transpose(1, 2).flatten(2)], None


ROPE_FREQ = torch.tensor([1.0, 0.1, 0.01])
#: T5-style buckets of the distances key - query from -3 to 5 (4 queries, 6 keys)
BUCKETS = [3, 3, 2, 0, 1, 1, 4, 4, 4]


def relative_bias(degrees, xs, ps):
    """Unscaled scores plus table[bucket(key - query)] per head, causal."""
    q, k, v = (t.unflatten(2, (2, -1)).transpose(1, 2) for t in xs)
    (table,) = ps
    rows, keys = q.shape[2], k.shape[2]
    distance = torch.arange(keys)[None, :] - torch.arange(rows)[:, None] + rows - 1
    scores = q @ k.transpose(-1, -2) + table[torch.tensor(BUCKETS)[distance]].permute(2, 0, 1)
    scores = scores.masked_fill(torch.ones(rows, keys, dtype=torch.bool).triu(1), -math.inf)
    return [(scores.softmax(-1) @ v).transpose(1, 2).flatten(2)], None

CASES = [
    Case("input", lambda g: g.input((4, 6)), plain(lambda x: x)),
    Case("input_ids", lambda g: g.input((4, 3), dtype="int64"), plain(lambda x: x)),
    *[Case(fn, lambda g, fn=fn: g.unary(g.input((4, 2, 6)), fn), plain(f))
      for fn, f in UNARY.items()],
    *[Case(fn, lambda g, fn=fn, a=a: g.add("unary", [g.input((4, 2, 6))], {"fn": fn, **a}).outputs[0],
           plain(f)) for fn, (a, f) in NUMBERED.items()],
    Case("rsqrt", lambda g: g.unary(g.input((4, 2, 6)), "rsqrt"), plain(torch.rsqrt),
         positive=True),
    Case("slice", lambda g: g.add("slice", [g.input((4, 6, 3))],
                                  {"axis": 1, "start": 2, "stop": 6}).outputs[0],
         plain(lambda x: x[:, 2:6])),
    Case("select", lambda g: g.add("slice", [g.input((4, 6, 4))],
                                   {"axis": 2, "start": 1, "stop": 2, "squeeze": True}).outputs[0],
         plain(lambda x: x[:, :, 1:2].squeeze(2))),
    Case("slice_ids", lambda g: g.add("slice", [g.input((4, 6), dtype="int64")],
                                      {"axis": 1, "start": 1, "stop": 5}).outputs[0],
         plain(lambda x: x[:, 1:5])),
    Case("transpose", lambda g: g.add("transpose", [g.input((4, 2, 3, 6))],
                                      {"dims": [1, 3]}).outputs[0],
         plain(lambda x: x.transpose(1, 3))),
    Case("parameter", lambda g: g.add("parameter", [], {"shape": [1, 2, 6], "batch": 4,
                                                        "leading_one": True}).outputs[0],
         plain(lambda w: w.expand(4, 2, 6))),
    Case("parameter_rows", lambda g: g.add("parameter", [], {"shape": [2, 6], "batch": 4,
                                                             "leading_one": False}).outputs[0],
         plain(lambda w: w.expand(4, 2, 6))),
    Case("mean", lambda g: g.add("mean", [g.input((4, 2, 6))], {}).outputs[0],
         plain(lambda x: x.mean(-1, keepdim=True))),
    Case("channel_mul", lambda g: g.add("channel_mul", [g.input((4, 2, 6))], {}).outputs[0],
         plain(lambda x, w: x * w)),
    Case("rotary", lambda g: g.add("rotary", [g.input((2, 4, 12))],
                                   {"heads": 2, "inv_freq": ROPE_FREQ.tolist(),
                                    "scaling": 0.5}).outputs[0], rotary),
    Case("add_broadcast", lambda g: g.add_(g.input((4, 1, 6)), g.input((1, 4, 6))),
         plain(torch.add)),
    Case("sub", lambda g: g.binary(g.input((4, 4, 6)), g.input((4, 4, 6)), "sub"),
         plain(torch.sub)),
    Case("mul_broadcast", lambda g: g.binary(g.input((4, 4, 6)), g.input((4, 4, 1)), "mul"),
         plain(torch.mul)),
    Case("concat", lambda g: g.concat([g.input((4, 2, 6)), g.input((4, 3, 6))], axis=1),
         plain(lambda a, b: torch.cat([a, b], 1))),
    Case("stack", lambda g: g.stack([g.input((4, 6)) for _ in range(3)], axis=1),
         plain(lambda *xs: torch.stack(xs, 1))),
    Case("split", lambda g: g.split(g.input((4, 6, 4)), [2, 4], axis=1),
         lambda d, xs, ps: (list(torch.split(xs[0], [2, 4], 1)), None)),
    Case("reshape", lambda g: g.flatten(g.input((4, 3, 2))), plain(lambda x: x.reshape(4, 6))),
    Case("conv", lambda g: g.conv2d(image(g), 4, kernel=3, padding=1),
         plain(lambda x, w, b: F.conv2d(x, w, b, padding=1))),
    Case("conv_strided", lambda g: g.conv2d(image(g, (2, 3, 8, 7)), 4, kernel=(5, 3), stride=2,
                                            padding=(2, 1), bias=False),
         plain(lambda x, w: F.conv2d(x, w, stride=2, padding=(2, 1)))),
    Case("conv_dilated", lambda g: g.conv2d(image(g, (1, 2, 9, 9)), 2, kernel=3, padding=2,
                                            dilation=2),
         plain(lambda x, w, b: F.conv2d(x, w, b, padding=2, dilation=2)), devices=9),
    Case("maxpool", lambda g: g.pool2d(image(g), 3, stride=2, padding=1),
         plain(lambda x: F.max_pool2d(x, 3, 2, 1))),
    Case("avgpool", lambda g: g.pool2d(image(g), 3, stride=1, padding=1, mode="avg"),
         plain(lambda x: F.avg_pool2d(x, 3, 1, 1))),
    Case("adaptive_avg", lambda g: g.adaptive_pool2d(image(g, (2, 2, 9, 7)), (4, 3)),
         plain(lambda x: F.adaptive_avg_pool2d(x, (4, 3)))),
    Case("adaptive_max", lambda g: g.adaptive_pool2d(image(g, (2, 2, 9, 7)), (4, 3), "max"),
         plain(lambda x: F.adaptive_max_pool2d(x, (4, 3)))),
    Case("global_avg", lambda g: g.adaptive_pool2d(image(g), 1),
         plain(lambda x: x.mean((2, 3), keepdim=True))),
    Case("batchnorm", lambda g: g.batchnorm(g.input((4, 4, 3, 3))), batchnorm_per_sample_block),
    Case("batchnorm_nc", lambda g: g.batchnorm(g.input((4, 6))), batchnorm_per_sample_block),
    Case("linear", lambda g: g.linear(g.input((4, 5)), 6), plain(F.linear)),
    Case("linear_seq", lambda g: g.linear(g.input((4, 2, 5)), 4, bias=False), plain(F.linear)),
    Case("linear_transposed", lambda g: g.linear(g.input((4, 2, 5)), 4, transposed=True),
         plain(lambda x, w, b: x @ w + b)),
    Case("linear_rows", lambda g: g.linear(g.input((4, 2, 5)), 4, rows=(2, 8)),
         plain(lambda x, w, b: F.linear(x, w[2:6], b[2:6]))),
    Case("embedding", lambda g: g.embedding(g.input((4, 3), dtype="int64"), 10, 4),
         plain(F.embedding)),
    Case("embedding_padding", lambda g: g.embedding(g.input((4, 3), dtype="int64"), 3, 4,
                                                    padding_idx=1),
         plain(lambda ids, w: F.embedding(ids, w, padding_idx=1))),
    Case("matmul", lambda g: g.matmul(g.input((4, 2, 3)), g.input((4, 3, 4))),
         plain(torch.matmul)),
    Case("layernorm", lambda g: g.layernorm(g.input((4, 2, 6))),
         plain(lambda x, w, b: F.layer_norm(x, (6,), w, b))),
    Case("softmax_ce", lambda g: g.softmax_ce(g.input((4, 3, 5)), g.input((4, 3), "int64")),
         softmax_ce),
    Case("softmax_ce_2d", lambda g: g.softmax_ce(g.input((4, 5)), g.input((4,), "int64")),
         softmax_ce),
    Case("softmax_ce_per_pixel", lambda g: g.softmax_ce(
        g.input((4, 3, 2, 4)), g.input((4, 2, 4), "int64"), class_dim=1), softmax_ce_per_pixel),
    Case("lstm_first", lambda g: g.lstm_cell(g.input((4, 5)), None, 4), lstm_cell),
    Case("lstm", lambda g: g.lstm_cell(g.input((4, 5)), (g.input((4, 4)), g.input((4, 4))), 4),
         lstm_cell),
    Case("attention", lambda g: g.attention(g.input((4, 6)), g.input((4, 3, 6))),
         plain(additive_attention)),
    Case("mha_causal", lambda g: g.multihead_attention(*(g.input((2, 4, 8)) for _ in "qkv"), 4),
         attention_heads(4, causal=True)),
    Case("mha", lambda g: g.multihead_attention(*(g.input((2, 4, 8)) for _ in "qkv"), 2,
                                                causal=False),
         attention_heads(2, causal=False)),
    Case("mha_cross", lambda g: g.multihead_attention(g.input((2, 4, 8)), g.input((2, 6, 8)),
                                                      g.input((2, 6, 8)), 2, causal=False),
         attention_heads(2, causal=False)),
    Case("mha_relative_bias", lambda g: g.add("multihead_attention", [
        g.input((2, 4, 8)), g.input((2, 6, 8)), g.input((2, 6, 8))],
        {"heads": 2, "causal": True, "scale": 1.0, "buckets": BUCKETS,
         "num_buckets": 5}).outputs[0], relative_bias),
    Case("mha_cross_causal", lambda g: g.multihead_attention(
        g.input((2, 4, 8)), g.input((2, 6, 8)), g.input((2, 6, 8)), 2),
         attention_heads(2, causal=True)),
]


def cut(t: torch.Tensor, region: Region) -> torch.Tensor:
    return t[tuple(slice(start, stop) for start, stop in region)]


def whole(op: Op, case: Case, degrees, inputs, params, grad_outputs):
    """The reference outputs and loss, and the gradients of sum(out * grad) + loss."""
    leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in (*inputs, *params)]
    outputs, loss = case.ref(degrees, leaves[:len(inputs)], leaves[len(inputs):])
    objective = sum((o * g).sum() for o, g in zip(outputs, grad_outputs) if g is not None)
    objective = objective + (loss if loss is not None else 0)
    wanted = [t for t in leaves if t.requires_grad]
    found = iter(torch.autograd.grad(objective, wanted, allow_unused=True) if wanted else ())
    grads = []
    for t in leaves:
        grad = next(found) if t.requires_grad else None
        grads.append(torch.zeros_like(t) if grad is None and t.requires_grad else grad)
    return outputs, loss, grads


def assembled(op: Op, regions: list[Region], inputs, params, grad_outputs):
    """Every block computed on its own, put back together."""
    outputs = [torch.zeros(t.shape, dtype=DTYPE if t.dtype.startswith("float") else torch.int64)
               for t in op.outputs]
    covered = [torch.zeros(t.shape, dtype=torch.int64) for t in op.outputs]
    grads = [torch.zeros_like(t) if t.is_floating_point() else None for t in (*inputs, *params)]
    loss = None
    for region in regions:
        in_regions = operand_regions(op, region)
        p_regions = [op.param_region(i, region) for i in range(len(params))]
        xs = [cut(t, r) for t, r in zip(inputs, in_regions)]
        ps = [cut(t, r) for t, r in zip(params, p_regions)]
        out_regions = op.output_regions(region)
        for out, cover, block, r in zip(outputs, covered, forward_block(op, region, xs, ps),
                                        out_regions):
            cut(out, r)[...] = block
            cut(cover, r)[...] += 1
        block_loss = loss_block(op, region, xs, ps)
        if block_loss is not None:
            loss = block_loss if loss is None else loss + block_loss
        gouts = [None if g is None else cut(g, r) for g, r in zip(grad_outputs, out_regions)]
        gin, gparam = backward_block(op, region, xs, ps, gouts)
        for total, grad, r in zip(grads, [*gin, *gparam], [*in_regions, *p_regions]):
            if grad is not None:
                cut(total, r)[...] += grad
    assert all(bool((c == 1).all()) for c in covered), "blocks must tile every output once"
    return outputs, loss, grads


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_blocks_assemble_to_the_whole_op(case):
    op = case.op()
    gen = torch.Generator().manual_seed(0)
    inputs, params = block_tensors(op, full_region(op.space_shape), dtype=DTYPE, generator=gen)
    # the whole inputs: an op may read only part of one (a slice)
    inputs = [t if tuple(t.shape) == g.shape else
              torch.randn(g.shape, dtype=DTYPE, generator=gen) if t.is_floating_point() else
              torch.randint(0, 5, g.shape, generator=gen)
              for t, g in zip(inputs, kernel_for(op.type).operands(op))]
    if case.positive:
        inputs = [t.abs() + 0.1 for t in inputs]
    grad_outputs = [torch.randn(t.shape, dtype=DTYPE, generator=gen)
                    if t.dtype.startswith("float") else None for t in op.outputs]
    configs = {c.degrees: c for c in valid_configs(op, case.devices)}
    assert len(configs) > 1 or op.type == "input"
    for degrees, config in configs.items():
        expected = whole(op, case, degrees, inputs, params, grad_outputs)
        got = assembled(op, config.regions(op), inputs, params, grad_outputs)
        for what, e, g in zip(("outputs", "loss", "gradients"), expected, got):
            torch.testing.assert_close(g, e, msg=lambda m: f"{what}, degrees {degrees}: {m}")


def test_every_op_type_has_a_kernel():
    assert set(KERNELS) == set(OP_TYPES)
    with pytest.raises(GraphError, match="no kernel for op type 'nope'"):
        kernel_for("nope")


def test_halo_blocks_pad_only_true_borders():
    """One-row output blocks of a strided conv: each reads its halo rows, and only the
    first and last are padded."""
    op = CASES[[c.name for c in CASES].index("conv_strided")].op()
    inputs, params = block_tensors(op, full_region(op.space_shape), dtype=DTYPE)
    reference = F.conv2d(inputs[0], params[0], stride=2, padding=(2, 1))
    for row in range(op.outputs[0].shape[2]):
        region = ((0, 2), (0, 4), (row, row + 1), (0, 4))
        needed = operand_regions(op, region)[0]
        assert needed[2] == (max(2 * row - 2, 0), min(2 * row + 3, 8))
        block = cut(inputs[0], needed)
        out, = forward_block(op, region, [block], [cut(params[0], op.param_region(0, region))])
        torch.testing.assert_close(out, reference[:, :, row:row + 1])


def test_dropout_blocks_agree_with_the_whole_op():
    g = GraphBuilder("d")
    op = g.dropout(g.input((4, 8, 16))).producer
    full = full_region(op.space_shape)
    (x,), _ = block_tensors(op, full)
    ones = torch.ones_like(x)
    (whole_out,) = forward_block(op, full, [ones], [], seed=7)
    assert set(whole_out.unique().tolist()) == {0.0, 2.0}
    assert 0.4 < (whole_out == 0).double().mean() < 0.6
    (other,) = forward_block(op, full, [ones], [], seed=8)
    assert not torch.equal(other, whole_out)
    for config in valid_configs(op, 4):
        for region in config.regions(op):
            out, = forward_block(op, region, [cut(ones, region)], [], seed=7)
            assert torch.equal(out, cut(whole_out, region))
            (grad,), _ = backward_block(op, region, [cut(x, region)], [], [torch.ones_like(out)],
                                        seed=7)
            assert torch.equal(grad, out)


def test_block_tensors_fit_the_block():
    g = GraphBuilder("t")
    logits = g.linear(g.embedding(g.input((8, 3), dtype="int64"), 50, 6), 7)
    loss_op = g.softmax_ce(logits, g.input((8, 3), dtype="int64")).producer
    embed = logits.producer.inputs[0].producer
    for op, bound in ((embed, 50), (loss_op, 7)):
        region = tuple((0, d.size // 2) if d.parallel else (0, d.size) for d in op.space)
        inputs, params = block_tensors(op, region, generator=torch.Generator().manual_seed(1))
        ids = inputs[0] if op is embed else inputs[1]
        assert ids.dtype == torch.int64 and 0 <= int(ids.min()) and int(ids.max()) < bound
        assert [tuple(t.shape) for t in params] == [
            tuple(b - a for a, b in op.param_region(i, region)) for i in range(len(params))]
        outs = forward_block(op, region, inputs, params)
        assert [tuple(o.shape) for o in outs] == [
            tuple(b - a for a, b in r) for r in op.output_regions(region)]
        assert all(o.dtype == torch.float32 for o in outs)
        with torch.no_grad():  # a profiler may time under no_grad; backward still works
            _, grads = backward_block(op, region, inputs, params, [torch.ones_like(outs[0])])
        assert all(g.shape == p.shape and g.abs().sum() > 0 for g, p in zip(grads, params))
    a, b = (block_tensors(embed, full_region(embed.space_shape),
                          generator=torch.Generator().manual_seed(1))[0][0] for _ in range(2))
    assert torch.equal(a, b)


@pytest.fixture
def conv():
    g = GraphBuilder("t")
    op = g.conv2d(image(g), 4, kernel=3, padding=1).producer
    region = ((0, 1), (0, 2), (0, 4), (0, 8))
    return op, region, *block_tensors(op, region)


def test_wrong_block_shape_is_a_clear_error(conv):
    op, region, (x,), params = conv
    with pytest.raises(GraphError, match=r"input 0 block has shape \[1, 3, 4, 8\], expected "
                                         r"\[1, 3, 5, 8\]"):
        forward_block(op, region, [x[:, :, :4]], params)
    with pytest.raises(GraphError, match=r"parameter 0 \(weight\) block has shape \[4, 3, 3, 3\]"):
        forward_block(op, region, [x], [torch.zeros(4, 3, 3, 3), params[1]])
    with pytest.raises(GraphError, match="1 input blocks needed, 2 given"):
        forward_block(op, region, [x, x], params)
    with pytest.raises(GraphError, match=r"gradient of output 0 has shape \[1, 4, 4, 8\]"):
        backward_block(op, region, [x], params, [torch.zeros(1, 4, 4, 8)])


def test_bad_region_or_dtype_is_a_clear_error(conv):
    op, region, inputs, params = conv
    with pytest.raises(GraphError, match="block range \\[0, 9\\) of dim 'height'"):
        forward_block(op, ((0, 1), (0, 2), (0, 9), (0, 8)), inputs, params)
    g = GraphBuilder("t")
    mha = g.multihead_attention(*(g.input((2, 4, 8)) for _ in "qkv"), 4).producer
    with pytest.raises(GraphError, match="on multiples of 2"):  # a block must hold whole heads
        block_tensors(mha, ((0, 2), (0, 4), (0, 3)))
    embed = g.embedding(g.input((2, 3), dtype="int64"), 10, 4).producer
    region = full_region(embed.space_shape)
    _, params = block_tensors(embed, region)
    with pytest.raises(GraphError, match="input 0 must be an integer tensor"):
        forward_block(embed, region, [torch.zeros(2, 3)], params)


def test_graph_package_stays_torch_free():
    code = "import sys, flextui.graph; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=HANG_S)
