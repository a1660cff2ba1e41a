"""NMT from the FlexFlow paper (Table 4, Figure 13): a GNMT-style encoder-decoder for
WMT English-German. 2 encoder and 2 decoder LSTM layers of 1024 units, 40 steps each;
decoder layer l starts from encoder layer l's final (h, c). Every decoder step attends
(Bahdanau) over the top encoder layer's outputs, then a softmax over the vocabulary."""

from flextui.graph import GraphBuilder, OpGraph
from flextui.library.models._rnn import State, embed_tokens, lstm_stack

DESCRIPTION = "GNMT-style NMT: 2+2 LSTM layers x 1024, 40 steps, attention, softmax (WMT en-de)"
DEFAULTS = {"batch_size": 64, "steps": 40, "layers": 2, "hidden": 1024, "vocab": 32000}
RANGES = {"steps": (1, 1000), "layers": (1, 64), "hidden": (1, 65_536),
          "vocab": (1, 10_000_000)}
#: the FlexFlow paper's batch on each GPU (section 8): --batch-per-device 64
PAPER_BATCH_PER_DEVICE = 64


def build(batch_size: int, steps: int, layers: int, hidden: int, vocab: int) -> OpGraph:
    g = GraphBuilder("nmt", batch_size=batch_size, family="rnn")
    states: list[State | None] = [None] * layers
    outputs = []
    with g.scope("encoder"):
        for t in range(steps):
            with g.scope(f"step{t}"):
                x = embed_tokens(g, batch_size, vocab, hidden, shared="encoder.embed")
                states = lstm_stack(g, x, states, hidden, prefix="encoder.lstm")
                outputs.append(states[-1][0])
        keys = g.stack(outputs, axis=1, name="keys")  # [B, steps, hidden]
    with g.scope("decoder"):
        for t in range(steps):
            with g.scope(f"step{t}"):
                x = embed_tokens(g, batch_size, vocab, hidden, shared="decoder.embed")
                states = lstm_stack(g, x, states, hidden, prefix="decoder.lstm")
                context = g.attention(states[-1][0], keys, name="attention", shared="attention")
                logits = g.linear(context, vocab, name="logits", shared="softmax")
                labels = g.input((batch_size,), dtype="int64", name="labels")
                g.softmax_ce(logits, labels, name="loss")
    return g.build()
