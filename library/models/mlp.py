"""A plain multi-layer perceptron: ``layers`` hidden linear + relu layers of ``width``
units, then a linear classifier and a softmax."""

from flextui.graph import GraphBuilder, OpGraph

DESCRIPTION = "Plain MLP: 4 hidden layers x 4096, softmax over 1000 classes"
DEFAULTS = {"batch_size": 64, "in_features": 1024, "width": 4096, "layers": 4,
            "num_classes": 1000}
RANGES = {"in_features": (1, 1 << 20), "width": (1, 1 << 20), "layers": (0, 1024),
          "num_classes": (1, 1_000_000)}


def build(batch_size: int, in_features: int, width: int, layers: int,
          num_classes: int) -> OpGraph:
    g = GraphBuilder("mlp", batch_size=batch_size, family="mlp")
    x = g.input((batch_size, in_features), name="features")
    for i in range(1, layers + 1):
        x = g.relu(g.linear(x, width, name=f"fc{i}"), name=f"relu{i}")
    logits = g.linear(x, num_classes, name="classifier")
    labels = g.input((batch_size,), dtype="int64", name="labels")
    g.softmax_ce(logits, labels, name="loss")
    return g.build()
