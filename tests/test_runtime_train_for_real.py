"""A user's model file with its own data, trained as a user would train it: AdamW, a
cosine learning rate after a warm-up, float64, on 2 CPU ranks. Every step's loss that
``flextui launch --json`` reports equals a plain PyTorch loop written here over the same
items in the documented order (torch.optim.AdamW, LambdaLR), nothing of flextui's."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from data_loop import plain_losses
from flextui.runtime.metrics import Start
from flextui.runtime.runlog import read_run_log
from helpers import HANG_S
from processes import wait_gone

DIGITS = Path(__file__).with_name("torch_models") / "perceptron_data.py"
STEPS = 5  # 1 untimed, 4 timed: the 40 items' 5 batches of 8


def warmup_cosine(step):
    """transformers' get_cosine_schedule_with_warmup over 5 steps, 1 of warm-up."""
    if step < 1:
        return step / 1
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * (step - 1) / (STEPS - 1))))


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
@pytest.mark.parametrize("strategy", ["data-parallel", "random"])
def test_a_model_files_data_trains_with_adamw_and_a_cosine_rate_as_a_plain_loop(
        tmp_path, strategy):
    log = tmp_path / "run.ffrun"
    proc = subprocess.run(
        [sys.executable, "-m", "flextui", "launch", "-m", str(DIGITS), "--nproc-per-node", "2",
         "--strategy", strategy, "--seed", "3", "--shuffle", "--optimizer", "adamw",
         "--lr", "0.02", "--weight-decay", "0.05", "--lr-schedule", "cosine",
         "--warmup-steps", "1", "--precision", "fp64", "--warmup", "1", "--steps", "4",
         "--json", "--run-log", str(log)],
        cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    rows = json.loads(proc.stdout)["per_step"]
    expected = plain_losses(
        DIGITS, STEPS, 8, seed=3, shuffle=True, schedule=warmup_cosine,
        optimizer=lambda ps: torch.optim.AdamW(ps, lr=0.02, weight_decay=0.05))
    assert [row["step"] for row in rows] == list(range(STEPS))
    assert [row["loss"] for row in rows] == pytest.approx(expected, rel=1e-9)
    assert [row["lr"] for row in rows] == pytest.approx(
        [0.02 * warmup_cosine(k) for k in range(STEPS)], rel=1e-12)
    pids = [r.pid for r in read_run_log(log).records if isinstance(r, Start)]
    assert len(pids) == 2 and wait_gone(pids) == []
