"""LeNet-5 (LeCun et al. 1998) on 28x28 single-channel images: the 6-layer CNN that the
FlexFlow paper (section 8.3) searches exhaustively on 4 devices."""

from flextui.graph import GraphBuilder, OpGraph

DESCRIPTION = "LeNet-5 CNN for 28x28 images (paper 8.3: exhaustive-search check)"
DEFAULTS = {"batch_size": 64, "num_classes": 10}
RANGES = {"num_classes": (1, 1_000_000)}


def build(batch_size: int, num_classes: int) -> OpGraph:
    g = GraphBuilder("lenet", batch_size=batch_size, family="cnn")
    x = g.input((batch_size, 1, 28, 28), name="images")
    x = g.pool2d(g.relu(g.conv2d(x, 6, kernel=5, padding=2, name="conv1")), 2, name="pool1")
    x = g.pool2d(g.relu(g.conv2d(x, 16, kernel=5, name="conv2")), 2, name="pool2")
    x = g.flatten(x, name="flatten")
    x = g.relu(g.linear(x, 120, name="fc1"))
    x = g.relu(g.linear(x, 84, name="fc2"))
    logits = g.linear(x, num_classes, name="fc3")
    labels = g.input((batch_size,), dtype="int64", name="labels")
    g.softmax_ce(logits, labels, name="loss")
    return g.build()
