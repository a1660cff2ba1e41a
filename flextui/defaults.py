"""What flextui works on when nobody says: the model and cluster every command and the
app's first launch default to (the app takes the detected machine instead when it has
GPUs to split over).

MLP on one node of the paper's P100s (4 GPUs): the search finds a strategy about 12x
faster than the best built-in one (18.3 -> 1.5 ms) within a second on a laptop CPU, so
a first search shows its curve drop at once (AlexNet, LeNet and RNNTC gain under 20%
there)."""

DEFAULT_MODEL = "mlp"
DEFAULT_CLUSTER = "p100-4x4@1node"   # a built-in cluster resized: its name loads as is
