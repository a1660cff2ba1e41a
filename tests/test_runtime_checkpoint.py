"""Checkpoints (``launch --save/--resume``, ``export-weights``): 10 steps in one launch
equal 5 steps, a save, and 5 resumed steps in a second launch, loss for loss and
parameter for parameter (==), with the optimizer's state sharded; the saved weights load into the user's module; a
checkpoint that is missing, damaged or of another strategy is refused (exit 2)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.runtime.checkpoint import whole_weights
from flextui.runtime.checkpointing import META, Checkpointing, CheckpointMeta, newest
from flextui.runtime.metrics import Start
from flextui.runtime.runlog import read_run_log
from flextui.runtime.spec import LaunchSpec, Training, lr_at
from flextui.strategy import ShardStage
from flextui.strategy.builtins import random_strategy
from flextui.strategy.file import save_strategy
from helpers import HANG_S
from processes import wait_gone

MODEL = Path(__file__).with_name("torch_models") / "tanh_data96.py"
#: AdamW with a warm-up that runs past the resumed step, on shuffled data (the position
#: in the epoch's permutation counts)
TRAIN = ["--seed", "5", "--shuffle", "--optimizer", "adamw",
         "--lr", "0.05", "--weight-decay", "0.1", "--warmup-steps", "8",
         "--precision", "fp64", "--warmup", "0"]


def split_and_replicated(tmp_path: Path) -> str:
    """A strategy file splitting the first layer's parameters over the 2 ranks and
    holding the second's whole on both (the random strategy of seed 3), its training
    state sharded over the two: the first layer's at ZeRO stage 2 (each rank keeps half
    the AdamW state), the second's at stage 3 (and half the parameters, gathered for
    each pass: a checkpoint saves them whole, a resume keeps its half)."""
    graph, cluster = load_model(str(MODEL)), load_named_cluster("local-cpu-2")
    path = tmp_path / "strategy.json"
    chosen = random_strategy(graph, cluster, seed=3).with_shards(
        {name: ShardStage.PARAMETERS if name.startswith("2.") else ShardStage.GRADIENTS
         for name in graph.parameters})
    save_strategy(path, chosen, graph, cluster)
    return str(path)


def launch(tmp_path: Path, name: str, *extra: str, strategy: str = ""
           ) -> subprocess.CompletedProcess:
    log = tmp_path / f"{name}.ffrun"
    strategy = strategy or split_and_replicated(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "flextui", "launch", "-m", str(MODEL), "--nproc-per-node", "2",
         "--strategy", strategy, *TRAIN, *extra, "--json", "--run-log", str(log)],
        cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode == 0:
        pids = [r.pid for r in read_run_log(log).records if isinstance(r, Start)]
        assert len(pids) == 2 and wait_gone(pids) == []
    return proc


def losses(proc: subprocess.CompletedProcess) -> list[tuple[float, float]]:
    """Each step's loss and learning rate in ``launch --json``."""
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    return [(row["loss"], row["lr"]) for row in json.loads(proc.stdout)["per_step"]]


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_ten_steps_equal_five_saved_and_five_resumed_and_the_weights_load(tmp_path):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    ten = losses(launch(tmp_path, "ten", "--steps", "10", "--save", str(whole),
                        "--save-every", "10"))
    first = losses(launch(tmp_path, "first", "--steps", "5", "--save", str(parts),
                          "--save-every", "5"))
    second = losses(launch(tmp_path, "second", "--steps", "5", "--resume", str(parts),
                           "--save", str(parts), "--save-every", "5"))
    assert first + second == ten
    (at_whole, meta_whole), (at_parts, meta_parts) = newest(whole), newest(parts)
    assert meta_whole.step == meta_parts.step == 10
    a, b = whole_weights(at_whole, meta_whole), whole_weights(at_parts, meta_parts)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # the strategy splits a parameter over the ranks and holds another whole on both
    assert meta_whole.boxes["0.weight"] == {0: ((0, 6), (0, 16)), 1: ((6, 12), (0, 16))}
    assert meta_whole.boxes["2.weight"] == {0: ((0, 4), (0, 12)), 1: ((0, 4), (0, 12))}

    out = tmp_path / "model.pt"
    proc = subprocess.run([sys.executable, "-m", "flextui", "export-weights", str(parts),
                           str(out)], capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    spec = importlib.util.spec_from_file_location("tanh_data96", MODEL)
    user = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(user)
    module = user.model().double()
    module.load_state_dict(torch.load(out, weights_only=True))
    assert module.state_dict().keys() == b.keys()
    assert all(torch.equal(module.state_dict()[k], b[k]) for k in b)


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_a_missing_damaged_or_other_strategys_checkpoint_is_refused(tmp_path):
    saved = tmp_path / "saved"
    losses(launch(tmp_path, "saved", "--steps", "2", "--save", str(saved), "--save-every",
                  "2"))
    proc = launch(tmp_path, "again", "--steps", "2", "--save", str(saved), "--save-every", "2")
    assert proc.returncode == 2 and "save over" in proc.stderr
    assert "Traceback" not in proc.stderr
    cases = {"nowhere": "does not exist"}
    for folder, said in cases.items():
        proc = launch(tmp_path, folder, "--steps", "2", "--resume", str(tmp_path / folder))
        assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr
    proc = launch(tmp_path, "other", "--steps", "2", "--resume", str(saved),
                  strategy="data-parallel")
    assert proc.returncode == 2 and "another strategy" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    (saved / "step-00000002" / META).write_bytes(b"\x93 not a checkpoint")
    proc = launch(tmp_path, "damaged", "--steps", "2", "--resume", str(saved))
    assert proc.returncode == 2 and "damaged" in proc.stderr and "Traceback" not in proc.stderr


def test_a_step_folder_without_its_metadata_is_half_written_and_not_taken(tmp_path):
    whole = tmp_path / "step-00000002"
    whole.mkdir()
    CheckpointMeta(2, 2, 0, "float32", "g", "s", {"w": (2,)}, {"w": "0.weight"},
                   {"w": {0: ((0, 2),)}}).write(whole)
    half = tmp_path / "step-00000004"  # its shards written, the ranks stopped before META
    half.mkdir()
    (half / "__0_0.distcp").write_bytes(b"shards")
    folder, meta = newest(tmp_path)
    assert folder == whole and meta.step == 2 and meta.boxes == {"w": {0: ((0, 2),)}}


def test_the_checkpointing_travels_in_the_plan_and_the_schedule_goes_on_from_its_step():
    graph, cluster = load_model(str(MODEL)), load_named_cluster("local-cpu-2")
    saving = Checkpointing("/ckpt", 5, "/ckpt", start=5)
    training = Training(steps=5, warmup=0, lr=0.1, warmup_steps=8, checkpoint=saving)
    spec = LaunchSpec(graph, random_strategy(graph, cluster, seed=3), 2, training)
    assert LaunchSpec.decode(spec.encode(), "plan").training == training
    assert [lr_at(training, k) for k in range(5)] == pytest.approx(
        [0.1 * k / 8 for k in range(5, 8)] + [0.1, 0.1])
