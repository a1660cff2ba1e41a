"""Inception-v3 as in torchvision (Szegedy et al. 2016) on 299x299 images, module names
included: a convolutional stem, Inception modules A (x3), B, C (x4), D and E (x2), an
auxiliary classifier off Mixed_6e with its own loss, and a pooled fully connected head.
27,161,264 parameters with the auxiliary classifier, 23,834,568 without."""

from flextui.graph import GraphBuilder, OpGraph, Tensor

DESCRIPTION = "Inception-v3 (torchvision) with auxiliary classifier, 299x299, 27.2M parameters"
DEFAULTS = {"batch_size": 64, "num_classes": 1000, "aux_logits": True}
RANGES = {"num_classes": (1, 1_000_000)}
#: the FlexFlow paper's batch on each GPU (section 8): --batch-per-device 64
PAPER_BATCH_PER_DEVICE = 64


def conv(g: GraphBuilder, x: Tensor, name: str, channels: int, kernel, stride=1,
         padding=0) -> Tensor:
    """torchvision's BasicConv2d: a bias-free conv, batchnorm and relu."""
    with g.scope(name):
        x = g.conv2d(x, channels, kernel, stride, padding, bias=False, name="conv")
        return g.relu(g.batchnorm(x, name="bn"), name="relu")


def pool_branch(g: GraphBuilder, x: Tensor, channels: int) -> Tensor:
    x = g.pool2d(x, 3, stride=1, padding=1, mode="avg", name="branch_pool.avgpool")
    return conv(g, x, "branch_pool", channels, 1)


def inception_a(g: GraphBuilder, x: Tensor, pool_features: int) -> Tensor:
    b1 = conv(g, x, "branch1x1", 64, 1)
    b5 = conv(g, conv(g, x, "branch5x5_1", 48, 1), "branch5x5_2", 64, 5, padding=2)
    b3 = conv(g, x, "branch3x3dbl_1", 64, 1)
    b3 = conv(g, conv(g, b3, "branch3x3dbl_2", 96, 3, padding=1), "branch3x3dbl_3", 96, 3,
              padding=1)
    return g.concat([b1, b5, b3, pool_branch(g, x, pool_features)], axis=1, name="concat")


def inception_b(g: GraphBuilder, x: Tensor) -> Tensor:
    b3 = conv(g, x, "branch3x3", 384, 3, stride=2)
    bd = conv(g, x, "branch3x3dbl_1", 64, 1)
    bd = conv(g, conv(g, bd, "branch3x3dbl_2", 96, 3, padding=1), "branch3x3dbl_3", 96, 3,
              stride=2)
    bp = g.pool2d(x, 3, stride=2, name="branch_pool")
    return g.concat([b3, bd, bp], axis=1, name="concat")


def inception_c(g: GraphBuilder, x: Tensor, c7: int) -> Tensor:
    row, col = ((1, 7), (0, 3)), ((7, 1), (3, 0))  # (kernel, padding) of 1x7 and 7x1
    b1 = conv(g, x, "branch1x1", 192, 1)
    b7 = conv(g, x, "branch7x7_1", c7, 1)
    b7 = conv(g, b7, "branch7x7_2", c7, row[0], padding=row[1])
    b7 = conv(g, b7, "branch7x7_3", 192, col[0], padding=col[1])
    bd = conv(g, x, "branch7x7dbl_1", c7, 1)
    for i, (kernel, padding) in enumerate([col, row, col, row], start=2):
        bd = conv(g, bd, f"branch7x7dbl_{i}", 192 if i == 5 else c7, kernel, padding=padding)
    return g.concat([b1, b7, bd, pool_branch(g, x, 192)], axis=1, name="concat")


def inception_d(g: GraphBuilder, x: Tensor) -> Tensor:
    b3 = conv(g, conv(g, x, "branch3x3_1", 192, 1), "branch3x3_2", 320, 3, stride=2)
    b7 = conv(g, x, "branch7x7x3_1", 192, 1)
    b7 = conv(g, b7, "branch7x7x3_2", 192, (1, 7), padding=(0, 3))
    b7 = conv(g, b7, "branch7x7x3_3", 192, (7, 1), padding=(3, 0))
    b7 = conv(g, b7, "branch7x7x3_4", 192, 3, stride=2)
    bp = g.pool2d(x, 3, stride=2, name="branch_pool")
    return g.concat([b3, b7, bp], axis=1, name="concat")


def split_1x3_3x1(g: GraphBuilder, x: Tensor, name: str) -> Tensor:
    """E's fork into parallel 1x3 and 3x1 convs, concatenated."""
    a = conv(g, x, f"{name}a", 384, (1, 3), padding=(0, 1))
    b = conv(g, x, f"{name}b", 384, (3, 1), padding=(1, 0))
    return g.concat([a, b], axis=1, name=f"{name}.concat")


def inception_e(g: GraphBuilder, x: Tensor) -> Tensor:
    b1 = conv(g, x, "branch1x1", 320, 1)
    b3 = split_1x3_3x1(g, conv(g, x, "branch3x3_1", 384, 1), "branch3x3_2")
    bd = conv(g, conv(g, x, "branch3x3dbl_1", 448, 1), "branch3x3dbl_2", 384, 3, padding=1)
    bd = split_1x3_3x1(g, bd, "branch3x3dbl_3")
    return g.concat([b1, b3, bd, pool_branch(g, x, 192)], axis=1, name="concat")


def aux_logits_head(g: GraphBuilder, x: Tensor, num_classes: int) -> Tensor:
    x = g.pool2d(x, 5, stride=3, mode="avg", name="avgpool")
    x = conv(g, conv(g, x, "conv0", 128, 1), "conv1", 768, 5)
    x = g.flatten(g.adaptive_pool2d(x, 1, name="adaptive_avgpool"), name="flatten")
    return g.linear(x, num_classes, name="fc")


def build(batch_size: int, num_classes: int, aux_logits: bool) -> OpGraph:
    g = GraphBuilder("inception_v3", batch_size=batch_size, family="cnn")
    x = g.input((batch_size, 3, 299, 299), name="images")
    labels = g.input((batch_size,), dtype="int64", name="labels")
    x = conv(g, x, "Conv2d_1a_3x3", 32, 3, stride=2)
    x = conv(g, x, "Conv2d_2a_3x3", 32, 3)
    x = conv(g, x, "Conv2d_2b_3x3", 64, 3, padding=1)
    x = g.pool2d(x, 3, stride=2, name="maxpool1")
    x = conv(g, x, "Conv2d_3b_1x1", 80, 1)
    x = conv(g, x, "Conv2d_4a_3x3", 192, 3)
    x = g.pool2d(x, 3, stride=2, name="maxpool2")
    modules = [("Mixed_5b", inception_a, 32), ("Mixed_5c", inception_a, 64),
               ("Mixed_5d", inception_a, 64), ("Mixed_6a", inception_b),
               ("Mixed_6b", inception_c, 128), ("Mixed_6c", inception_c, 160),
               ("Mixed_6d", inception_c, 160), ("Mixed_6e", inception_c, 192),
               ("Mixed_7a", inception_d), ("Mixed_7b", inception_e), ("Mixed_7c", inception_e)]
    for name, module, *args in modules:
        with g.scope(name):
            x = module(g, x, *args)
        if name == "Mixed_6e" and aux_logits:
            with g.scope("AuxLogits"):
                g.softmax_ce(aux_logits_head(g, x, num_classes), labels, name="loss")
    x = g.dropout(g.adaptive_pool2d(x, 1, name="avgpool"), name="dropout")
    logits = g.linear(g.flatten(x, name="flatten"), num_classes, name="fc")
    g.softmax_ce(logits, labels, name="loss")
    return g.build()
