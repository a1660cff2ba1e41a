"""TF32: float32 profiles on a GPU record the math mode they ran in, and the analytic
model times float32 convolutions at the TF32 peak torch runs them at by default."""

import msgpack
import pytest
import torch

from flextui.cost import AnalyticCostModel
from flextui.cost.cache import ProfileKey
from flextui.cost.mathmode import DEFAULT_FP32_MATH, fp32_math, measurement_now, uses_tf32
from flextui.cost.signatures import Measurement
from flextui.machine import Device, DeviceSpec, load_named_cluster
from flextui.machine.cluster import ClusterError
from flextui.machine.gpus import lookup_gpu
from helpers import model

A100 = "NVIDIA A100-SXM4-80GB"


@pytest.fixture
def tf32_flags():
    """Restores torch's float32 math flags after a test changes them."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_float32_profile_keys_on_a_gpu_record_the_math_mode(tf32_flags):
    graph = model("mlp")
    linear = next(op for op in graph.ops if op.type == "linear")
    block = linear.space_shape
    default = measurement_now("float32", True, A100)
    assert default.math == fp32_math("float32", A100) == DEFAULT_FP32_MATH   # torch 2.13
    torch.backends.cuda.matmul.allow_tf32 = True      # what a user's script may set
    tf32 = measurement_now("float32", True, A100)
    assert tf32.math == "conv=tf32,matmul=tf32"
    assert tf32.key(linear, block).encoded != default.key(linear, block).encoded
    key = tf32.key(linear, block)
    assert ProfileKey.from_encoded(key.encoded) == key and key.to_map()["math"] == tf32.math


def test_other_keys_encode_as_before_the_math_mode_existed():
    graph = model("mlp")
    linear = next(op for op in graph.ops if op.type == "linear")
    for dtype, device in (("float32", "cpu: AMD EPYC, 1 thread"), ("bfloat16", A100)):
        now = measurement_now(dtype, True, device)
        assert now.math == ""
        old = Measurement(dtype, True, device, torch.__version__)
        assert now.key(linear, linear.space_shape).encoded == \
            old.key(linear, linear.space_shape).encoded
        assert "math" not in now.key(linear, linear.space_shape).to_map()


def test_a_key_with_an_empty_math_mode_is_not_canonical():
    key = measurement_now("float32", True, A100).key(*_conv())
    data = {**key.to_map(), "math": ""}
    with pytest.raises(ValueError, match="canonical"):
        ProfileKey.from_encoded(msgpack.packb(data, use_bin_type=True))


def _conv():
    conv = next(op for op in model("alexnet", batch_size=64).ops if op.type == "conv2d")
    return conv, conv.space_shape


def test_which_ops_run_on_tf32():
    assert uses_tf32("conv2d", DEFAULT_FP32_MATH) and not uses_tf32("linear", DEFAULT_FP32_MATH)
    assert uses_tf32("lstm_cell", "conv=ieee,matmul=tf32")
    assert not uses_tf32("pool2d", "conv=tf32,matmul=tf32") and not uses_tf32("conv2d", "")


def test_the_analytic_model_times_float32_convolutions_at_the_tf32_peak():
    figures = lookup_gpu(A100)
    assert figures.peak_flops()["tfloat32"] == 156e12
    tf32 = Device(0, "gpu0", 0, DeviceSpec("A100", 2**36, figures.peak_flops(), 2039e9))
    plain = Device(0, "gpu0", 0, DeviceSpec("A100", 2**36, {"float32": 19.5e12}, 2039e9))
    analytic = AnalyticCostModel()
    conv, block = _conv()
    region = tuple((0, s) for s in block)
    flops, nbytes = conv.flops(region)[0], conv.block_bytes(region)
    assert flops / (156e12 * 0.6) > nbytes / (2039e9 * 0.8)          # compute-bound
    assert analytic.op_cost(conv, block, tf32).forward_s == pytest.approx(
        flops / (156e12 * 0.6) + 5e-6)
    assert analytic.op_cost(conv, block, plain).forward_s == pytest.approx(
        flops / (19.5e12 * 0.6) + 5e-6)
    fc = next(op for op in model("alexnet", batch_size=64).ops if op.type == "linear")
    assert analytic.op_cost(fc, fc.space_shape, tf32) == analytic.op_cost(fc, fc.space_shape,
                                                                           plain)


def test_cluster_files_may_give_a_tf32_peak(tmp_path):
    text = '''name = "tf32"
[device_kinds.A100]
memory = "80GiB"
peak_flops = { float32 = "19.5 TFLOPS", tfloat32 = "156 TFLOPS" }
mem_bandwidth = "2039 GB/s"
[nodes]
count = 1
gpus_per_node = 2
device = "A100"
[intra_node]
topology = "switch"
kind = "nvswitch"
bandwidth = "300 GB/s"
latency = "1us"
'''
    path = tmp_path / "tf32.toml"
    path.write_text(text)
    spec = load_named_cluster(str(path)).device(0).spec
    assert spec.peak_flops == {"float32": 19.5e12, "tfloat32": 156e12}
    with pytest.raises(ClusterError, match="tfloat32"):
        DeviceSpec("x", 1, {"float32": 1.0, "tf16": 2.0}, 1.0)
