"""The runtime's CUDA and NCCL paths: skipped on a machine without GPUs (the project's
own machines have none so far; the README says what has run only on the CPU)."""

import os
import subprocess
import sys

import pytest
import torch

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


@pytest.mark.slow
@pytest.mark.skipif(GPUS < 2, reason="needs two CUDA GPUs")
def test_launch_check_over_nccl(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "flextui", "launch", "-m", "lenet",
                           "--cluster", "local", "--strategy", "expert", "--check"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "check passed" in proc.stdout and "nccl" in proc.stdout
