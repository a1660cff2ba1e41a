"""ResNet-101 as in torchvision (v1.5: the stride sits on each bottleneck's 3x3 conv).
Bottleneck blocks [3, 4, 23, 3]; every conv is bias-free and followed by batchnorm;
the first block of each stage has a 1x1 conv + batchnorm shortcut. ``depth`` 50 or
152 gives ResNet-50 ([3, 4, 6, 3]) or ResNet-152 ([3, 8, 36, 3])."""

from flextui.errors import ModelError
from flextui.graph import GraphBuilder, OpGraph, Tensor

DESCRIPTION = "ResNet-101 (torchvision v1.5): bottleneck residual CNN, 44.5M parameters"
DEFAULTS = {"batch_size": 64, "num_classes": 1000, "image_size": 224, "depth": 101}
RANGES = {"num_classes": (1, 1_000_000), "image_size": (1, 4096), "depth": (50, 152)}
#: the FlexFlow paper's batch on each GPU (section 8): --batch-per-device 64
PAPER_BATCH_PER_DEVICE = 64

BLOCKS = {50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}


def conv_bn(g: GraphBuilder, x: Tensor, channels: int, kernel: int, stride: int = 1,
            padding: int = 0, conv: str = "conv", bn: str = "bn") -> Tensor:
    return g.batchnorm(g.conv2d(x, channels, kernel, stride, padding, bias=False, name=conv),
                       name=bn)


def bottleneck(g: GraphBuilder, x: Tensor, planes: int, stride: int) -> Tensor:
    out = g.relu(conv_bn(g, x, planes, 1, conv="conv1", bn="bn1"), name="relu1")
    out = g.relu(conv_bn(g, out, planes, 3, stride, 1, conv="conv2", bn="bn2"), name="relu2")
    out = conv_bn(g, out, planes * 4, 1, conv="conv3", bn="bn3")
    if stride != 1 or x.shape[1] != planes * 4:
        x = conv_bn(g, x, planes * 4, 1, stride, conv="downsample.0", bn="downsample.1")
    return g.relu(g.add_(out, x, name="add"), name="relu3")


def build(batch_size: int, num_classes: int, image_size: int, depth: int) -> OpGraph:
    if depth not in BLOCKS:
        raise ModelError(f"resnet depth must be one of {sorted(BLOCKS)}, not {depth}")
    g = GraphBuilder(f"resnet{depth}", batch_size=batch_size, family="cnn")
    x = g.input((batch_size, 3, image_size, image_size), name="images")
    x = g.relu(conv_bn(g, x, 64, 7, 2, 3, conv="conv1", bn="bn1"), name="relu")
    x = g.pool2d(x, 3, stride=2, padding=1, name="maxpool")
    for stage, (blocks, planes) in enumerate(zip(BLOCKS[depth], (64, 128, 256, 512)), start=1):
        for i in range(blocks):
            with g.scope(f"layer{stage}.{i}"):
                x = bottleneck(g, x, planes, 2 if i == 0 and stage > 1 else 1)
    x = g.flatten(g.adaptive_pool2d(x, 1, name="avgpool"), name="flatten")
    logits = g.linear(x, num_classes, name="fc")
    labels = g.input((batch_size,), dtype="int64", name="labels")
    g.softmax_ce(logits, labels, name="loss")
    return g.build()
