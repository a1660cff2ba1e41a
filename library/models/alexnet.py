"""AlexNet as in torchvision (Krizhevsky 2014's "one weird trick" single-tower variant):
five convolutions, three max-pools, an adaptive average pool to 6x6 and three fully
connected layers; 61,100,840 parameters with 1000 classes."""

from flextui.graph import GraphBuilder, OpGraph

DESCRIPTION = "AlexNet (torchvision): 5 conv + 3 fc layers, 61.1M parameters"
DEFAULTS = {"batch_size": 256, "num_classes": 1000, "image_size": 224}
RANGES = {"num_classes": (1, 1_000_000), "image_size": (63, 4096)}
#: the FlexFlow paper's batch on each GPU (section 8): --batch-per-device 256
PAPER_BATCH_PER_DEVICE = 256

#: (name, out channels, kernel, stride, padding, max-pool after)
CONVS = [("conv1", 64, 11, 4, 2, True), ("conv2", 192, 5, 1, 2, True),
         ("conv3", 384, 3, 1, 1, False), ("conv4", 256, 3, 1, 1, False),
         ("conv5", 256, 3, 1, 1, True)]


def build(batch_size: int, num_classes: int, image_size: int) -> OpGraph:
    g = GraphBuilder("alexnet", batch_size=batch_size, family="cnn")
    x = g.input((batch_size, 3, image_size, image_size), name="images")
    for i, (name, channels, kernel, stride, padding, pool) in enumerate(CONVS, start=1):
        x = g.relu(g.conv2d(x, channels, kernel, stride, padding, name=name), name=f"relu{i}")
        if pool:
            x = g.pool2d(x, 3, stride=2, name=f"pool{i}")
    x = g.flatten(g.adaptive_pool2d(x, 6, name="avgpool"), name="flatten")
    x = g.dropout(x, name="dropout6")
    x = g.relu(g.linear(x, 4096, name="fc6"), name="relu6")
    x = g.dropout(x, name="dropout7")
    x = g.relu(g.linear(x, 4096, name="fc7"), name="relu7")
    logits = g.linear(x, num_classes, name="fc8")
    labels = g.input((batch_size,), dtype="int64", name="labels")
    g.softmax_ce(logits, labels, name="loss")
    return g.build()
