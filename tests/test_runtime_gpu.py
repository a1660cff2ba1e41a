"""The runtime's CUDA and NCCL paths: skipped on a machine without GPUs (the project's
own machines have none so far; the README says what has run only on the CPU)."""

import os
import subprocess
import sys

import pytest
import torch

from flextui.cost.cache import decode_cache
from flextui.cost.cache_records import device_kind_slug
from flextui.graph import full_region
from flextui.machine import load_named_cluster
from flextui.runtime.comm import Comm
from flextui.runtime.engine import RankProgram, within
from flextui.runtime.plan import compile_plan
from flextui.runtime.reference import train_whole
from flextui.runtime.worker import relative_error
from flextui.strategy import ParallelConfig, Strategy
from helpers import HANG_S
from runtime_models import small, strategy

pytestmark = pytest.mark.gpu
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU")
def test_a_partitioned_step_on_a_gpu_equals_one_process_on_the_cpu():
    graph = small("mlp")
    s = strategy("random-2", graph, load_named_cluster("local-cpu-4"))
    s = Strategy({n: ParallelConfig(c.degrees, (0,) * len(c.devices)) for n, c in s.items()})
    program = RankProgram(compile_plan(graph, s, 1), 0, Comm(0, [], torch.device("cuda:0")),
                          dtype=torch.float64)
    losses = [program.step(step).loss_share for step in range(3)]
    reference = train_whole(graph, 3)
    assert losses == pytest.approx(reference.losses, rel=1e-9)
    for name, value in program.params.items():
        whole = reference.params[name]
        assert relative_error(value.detach().cpu(), whole[within(program.boxes[name],
                                                                 full_region(whole.shape))]) < 1e-9


@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU")
def test_launch_check_over_nccl(tmp_path):
    """A rank per GPU (one will do): NCCL reduces GPU tensors only, and a check's losses
    were summed on the CPU (the first GPU run failed there)."""
    proc = subprocess.run([sys.executable, "-m", "flextui", "launch", "-m", "lenet",
                           "--cluster", "local", "--check"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "check passed" in proc.stdout and "nccl" in proc.stdout


@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU")
def test_a_profile_on_the_gpu_times_every_task_there(tmp_path):
    """Every task is timed with CUDA events on cuda:0 and cached under the GPU's name,
    float32 with the math mode torch ran it in."""
    proc = subprocess.run([sys.executable, "-m", "flextui", "profile", "-m", "lenet",
                           "--max-devices", "2", "--profiles", str(tmp_path), "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    gpu = torch.cuda.get_device_name(0)
    [path] = tmp_path.glob("*.msgpack")
    assert path.stem == device_kind_slug(gpu)
    items = decode_cache(path.read_bytes()).items()
    assert items
    for key, entry in items:
        assert key.device_name == gpu and "conv=" in key.math
        assert entry.forward_s and entry.forward_s > 0 and entry.backward_s and entry.backward_s > 0
