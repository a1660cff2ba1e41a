"""Float32 math on GPUs: which float32 ops run on TF32 tensor cores.

From Ampere on, torch may run float32 convolutions (cuDNN) and matmuls (cuBLAS) on TF32
tensor cores, several times the float32 peak (A100: 156 against 19.5 TFLOPS). In torch
2.13 convolutions do by default (``torch.backends.cudnn.allow_tf32``) and matmuls do
not (``torch.backends.cuda.matmul.allow_tf32``). A float32 profile measured on a GPU
records the mode it ran in (``fp32_math``: ``"conv=tf32,matmul=ieee"``) in its keys, so
profiles measured in different modes never mix; on the CPU, and in float16 and
bfloat16, the mode is "" (keys as they always were). The analytic model times
float32 ops by the peak of the mode torch runs them in by default
(``DEFAULT_FP32_MATH``): ``tfloat32`` for convolutions, where a device gives one.
"""

from __future__ import annotations

from flextui.cost.signatures import Measurement
from flextui.machine.cpus import is_cpu

#: op types whose float32 kernels go through cuDNN convolutions, and through cuBLAS
#: matmuls (``graph.kernels``)
CONV_OPS = frozenset({"conv2d"})
MATMUL_OPS = frozenset({"linear", "matmul", "lstm_cell", "attention", "multihead_attention"})
#: torch 2.13's default float32 math on a GPU
DEFAULT_FP32_MATH = "conv=tf32,matmul=ieee"


def fp32_math(dtype: str, device_name: str) -> str:
    """The float32 math mode torch now runs ``dtype`` ops in on the GPU ``device_name``
    (its profile key records it); "" for other dtypes and for CPUs."""
    if dtype != "float32" or is_cpu(device_name):
        return ""
    import torch  # here: only profiling needs torch

    conv = "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"
    matmul = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"
    return f"conv={conv},matmul={matmul}"


def uses_tf32(op_type: str, math: str) -> bool:
    """Whether a float32 ``op_type`` runs on TF32 tensor cores in ``math``."""
    modes = dict(part.split("=", 1) for part in math.split(",") if "=" in part)
    group = "conv" if op_type in CONV_OPS else "matmul" if op_type in MATMUL_OPS else None
    return group is not None and modes.get(group) == "tf32"


def measurement_now(dtype: str, training: bool, device_name: str) -> Measurement:
    """What a task measured now on ``device_name`` is: the dtype and mode, this torch's
    version and float32 math."""
    import torch

    return Measurement(dtype, training, device_name, torch.__version__,
                       fp32_math(dtype, device_name))
