"""A GPT-2-style decoder-only transformer (defaults: GPT-2 small, 12 layers of width
768, 12 heads, 1024 tokens, the 50257-token BPE vocabulary). Pre-layernorm blocks;
the output projection is its own weight (not tied to the token embedding), so the
defaults have 163,037,184 parameters rather than GPT-2's 124,439,808."""

from flextui.graph import GraphBuilder, OpGraph, Tensor

DESCRIPTION = "GPT-2-style decoder transformer (defaults: GPT-2 small, untied head)"
DEFAULTS = {"batch_size": 8, "layers": 12, "width": 768, "heads": 12, "seq_len": 1024,
            "vocab": 50257}
RANGES = {"layers": (1, 256), "width": (1, 65_536), "heads": (1, 1024),
          "seq_len": (1, 1 << 20), "vocab": (1, 10_000_000)}


def block(g: GraphBuilder, x: Tensor, width: int, heads: int) -> Tensor:
    h = g.linear(g.layernorm(x, name="ln_1"), 3 * width, name="attn.qkv")
    q, k, v = g.split(h, [width, width, width], axis=2, name="attn.split")
    h = g.multihead_attention(q, k, v, heads, name="attn.attention")
    x = g.add_(x, g.linear(h, width, name="attn.proj"), name="residual1")
    h = g.gelu(g.linear(g.layernorm(x, name="ln_2"), 4 * width, name="mlp.fc"), name="mlp.gelu")
    return g.add_(x, g.linear(h, width, name="mlp.proj"), name="residual2")


def build(batch_size: int, layers: int, width: int, heads: int, seq_len: int,
          vocab: int) -> OpGraph:
    g = GraphBuilder("transformer", batch_size=batch_size, family="transformer")
    tokens = g.input((batch_size, seq_len), dtype="int64", name="tokens")
    positions = g.input((batch_size, seq_len), dtype="int64", name="positions")
    x = g.add_(g.embedding(tokens, vocab, width, name="wte"),
               g.embedding(positions, seq_len, width, name="wpe"), name="embed")
    for i in range(layers):
        with g.scope(f"h{i}"):
            x = block(g, x, width, heads)
    logits = g.linear(g.layernorm(x, name="ln_f"), vocab, bias=False, name="lm_head")
    labels = g.input((batch_size, seq_len), dtype="int64", name="labels")
    g.softmax_ce(logits, labels, name="loss")
    return g.build()
