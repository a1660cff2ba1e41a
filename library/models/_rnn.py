"""Shared construction of the unrolled LSTM models (rnntc, rnnlm, rnnlm2, nmt).

The leading underscore keeps this module out of the model list. Every time step is
its own set of ops; the ops of one layer at every step pass the same ``shared`` key,
so they share one set of parameters (the paper's "layer", Figure 13's grey boxes).
"""

from __future__ import annotations

from collections.abc import Sequence

from flextui.graph import GraphBuilder, OpGraph, Tensor

State = tuple[Tensor, Tensor]


def embed_tokens(g: GraphBuilder, batch_size: int, vocab: int, dim: int, shared: str) -> Tensor:
    """One step's token ids [B] (an int64 input) looked up in the table ``shared``."""
    ids = g.input((batch_size,), dtype="int64", name="ids")
    return g.embedding(ids, vocab, dim, name="embed", shared=shared)


def lstm_stack(g: GraphBuilder, x: Tensor, states: Sequence[State | None], hidden: int,
               prefix: str = "lstm") -> list[State]:
    """One time step through stacked LSTM layers: layer ``l`` reads layer ``l-1``'s h
    and its own previous (h, c) (None at the first step) and shares its parameters
    with the same layer of every other step under the key ``{prefix}{l}``. Returns the
    new states; the top layer's output is ``result[-1][0]``."""
    new: list[State] = []
    for layer, state in enumerate(states):
        h, c = g.lstm_cell(x, state, hidden, name=f"lstm{layer}", shared=f"{prefix}{layer}")
        new.append((h, c))
        x = h
    return new


def build_rnnlm(name: str, batch_size: int, steps: int, layers: int, hidden: int,
                vocab: int) -> OpGraph:
    """An unrolled LSTM language model: per step an embedding (one table), ``layers``
    LSTM layers, a linear layer to the vocabulary (one weight for all steps) and a
    softmax cross-entropy against that step's next-token labels."""
    g = GraphBuilder(name, batch_size=batch_size, family="rnn")
    states: list[State | None] = [None] * layers
    for t in range(steps):
        with g.scope(f"step{t}"):
            x = embed_tokens(g, batch_size, vocab, hidden, shared="embed")
            states = lstm_stack(g, x, states, hidden)
            logits = g.linear(states[-1][0], vocab, name="logits", shared="softmax")
            labels = g.input((batch_size,), dtype="int64", name="labels")
            g.softmax_ce(logits, labels, name="loss")
    return g.build()
