"""RNNTC from the FlexFlow paper (Table 4): text classification on Movie Reviews with
4 LSTM layers of 1024 units unrolled 40 steps; the top layer's last hidden state feeds
a linear classifier and a softmax."""

from flextui.graph import GraphBuilder, OpGraph
from flextui.library.models._rnn import State, embed_tokens, lstm_stack

DESCRIPTION = "RNN text classifier: 4 LSTM layers x 1024, 40 steps, softmax on the last step"
DEFAULTS = {"batch_size": 64, "steps": 40, "layers": 4, "hidden": 1024, "vocab": 20000,
            "embed_dim": 1024, "num_classes": 2}
RANGES = {"steps": (1, 1000), "layers": (1, 64), "hidden": (1, 65_536),
          "vocab": (1, 10_000_000), "embed_dim": (1, 65_536), "num_classes": (1, 1_000_000)}
#: the FlexFlow paper's batch on each GPU (section 8): --batch-per-device 64
PAPER_BATCH_PER_DEVICE = 64


def build(batch_size: int, steps: int, layers: int, hidden: int, vocab: int, embed_dim: int,
          num_classes: int) -> OpGraph:
    g = GraphBuilder("rnntc", batch_size=batch_size, family="rnn")
    states: list[State | None] = [None] * layers
    for t in range(steps):
        with g.scope(f"step{t}"):
            x = embed_tokens(g, batch_size, vocab, embed_dim, shared="embed")
            states = lstm_stack(g, x, states, hidden)
    logits = g.linear(states[-1][0], num_classes, name="classifier")
    labels = g.input((batch_size,), dtype="int64", name="labels")
    g.softmax_ce(logits, labels, name="loss")
    return g.build()
