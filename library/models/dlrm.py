"""DLRM (Naumov et al. 2019), the recommendation model: 13 dense features through a
bottom MLP (13-512-256-64), ``num_tables`` large embedding tables (one int64 id per
sample each), a feature interaction, and a top MLP (512-256-2) with a softmax over
click / no click.

Interaction: DLRM's "cat" mode by default, the concatenation of the bottom-MLP output
and every embedding, [B, (T+1) * D]. ``interaction="dot"`` gives DLRM's pairwise dot
products instead: the vectors stacked as Z [B, T+1, D] and as Z^T [B, D, T+1] (a
second stack on axis 2 stands in for a transpose), Z @ Z^T flattened to
[B, (T+1)^2] (the full matrix, where DLRM keeps the strict lower triangle), then
concatenated with the bottom-MLP output."""

from flextui.errors import ModelError
from flextui.graph import GraphBuilder, OpGraph, Tensor

DESCRIPTION = "DLRM recommendation model: bottom MLP, large embedding tables, top MLP"
DEFAULTS = {"batch_size": 2048, "num_tables": 8, "rows_per_table": 1000000, "embed_dim": 64,
            "interaction": "cat"}
RANGES = {"num_tables": (1, 1024), "rows_per_table": (1, 10**10), "embed_dim": (1, 65_536)}


def mlp(g: GraphBuilder, x: Tensor, widths: list[int], last_relu: bool = True) -> Tensor:
    for i, width in enumerate(widths, start=1):
        x = g.linear(x, width, name=f"fc{i}")
        if last_relu or i < len(widths):
            x = g.relu(x, name=f"relu{i}")
    return x


def build(batch_size: int, num_tables: int, rows_per_table: int, embed_dim: int,
          interaction: str) -> OpGraph:
    if interaction not in ("cat", "dot"):
        raise ModelError(f"dlrm interaction must be 'cat' or 'dot', not {interaction!r:.40}")
    g = GraphBuilder("dlrm", batch_size=batch_size, family="recommendation")
    dense = g.input((batch_size, 13), name="dense")
    with g.scope("bottom"):
        bottom = mlp(g, dense, [512, 256, embed_dim])
    vectors = [bottom]
    for i in range(num_tables):
        with g.scope(f"table{i}"):
            ids = g.input((batch_size,), dtype="int64", name="ids")
            vectors.append(g.embedding(ids, rows_per_table, embed_dim, name="embed"))
    with g.scope("interaction"):
        if interaction == "cat":
            x = g.concat(vectors, axis=1, name="concat")
        else:
            z = g.stack(vectors, axis=1, name="stack")
            zt = g.stack(vectors, axis=2, name="stack_t")
            dots = g.flatten(g.matmul(z, zt, name="dot"), name="flatten")
            x = g.concat([bottom, dots], axis=1, name="concat")
    with g.scope("top"):
        logits = mlp(g, x, [512, 256, 2], last_relu=False)
    labels = g.input((batch_size,), dtype="int64", name="labels")
    g.softmax_ce(logits, labels, name="loss")
    return g.build()
