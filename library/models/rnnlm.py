"""RNNLM from the FlexFlow paper (Table 4): an LSTM language model on Penn Treebank,
2 recurrent layers of 2048 units unrolled 40 steps, then a softmax over the vocabulary
at every step."""

from flextui.graph import OpGraph
from flextui.library.models._rnn import build_rnnlm

DESCRIPTION = "RNN language model: 2 LSTM layers x 2048, 40 steps, per-step softmax (PTB)"
DEFAULTS = {"batch_size": 64, "steps": 40, "layers": 2, "hidden": 2048, "vocab": 10000}
RANGES = {"steps": (1, 1000), "layers": (1, 64), "hidden": (1, 65_536),
          "vocab": (1, 10_000_000)}
#: the FlexFlow paper's batch on each GPU (section 8): --batch-per-device 64
PAPER_BATCH_PER_DEVICE = 64


def build(batch_size: int, steps: int, layers: int, hidden: int, vocab: int) -> OpGraph:
    return build_rnnlm("rnnlm", batch_size, steps, layers, hidden, vocab)
