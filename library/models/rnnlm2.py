"""The paper's small RNNLM variant (section 8.3): each recurrent layer unrolled only 2
steps, small enough that an exhaustive search over 4 devices can find the global
optimum to compare against. Sizes are scaled down as well to keep the graph tiny."""

from flextui.graph import OpGraph
from flextui.library.models._rnn import build_rnnlm

DESCRIPTION = "RNNLM unrolled 2 steps (paper 8.3: exhaustive-search check)"
DEFAULTS = {"batch_size": 64, "steps": 2, "layers": 2, "hidden": 256, "vocab": 1000}
RANGES = {"steps": (1, 1000), "layers": (1, 64), "hidden": (1, 65_536),
          "vocab": (1, 10_000_000)}


def build(batch_size: int, steps: int, layers: int, hidden: int, vocab: int) -> OpGraph:
    return build_rnnlm("rnnlm2", batch_size, steps, layers, hidden, vocab)
