"""A model file's dataset(): what a launch trains on, in the documented order, equal to
a plain PyTorch loop over the same items (tests/data_loop.py); each rank reads only its
sample blocks' items; an item that does not fit the graph's inputs is one message."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from data_loop import plain_losses
from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.runtime.comm import Comm
from flextui.runtime.data import ItemOrder, rank_feed
from flextui.runtime.datafeed import DataFeed, DataSource
from flextui.runtime.engine import RankProgram
from flextui.runtime.metrics import Check, Start
from flextui.runtime.plan import compile_plan
from flextui.runtime.runlog import read_run_log
from flextui.runtime.spec import LaunchSpec, Training
from flextui.strategy import builtin_strategy
from flextui.strategy.builtins import random_strategy
from helpers import HANG_S
from processes import wait_gone
from runtime_models import on_one_rank

MODELS = Path(__file__).with_name("torch_models")
DIGITS = MODELS / "perceptron_data.py"


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("partition", ["data-parallel", "random"])
def test_a_rank_program_trains_on_the_dataset_as_a_plain_loop(partition, shuffle):
    """Every block of a partition (samples and features split) on one rank: the 5
    steps of batch 8 the 40 items make."""
    graph = load_model(str(DIGITS))
    cluster = load_named_cluster("local-cpu-4")
    split = builtin_strategy("data-parallel", graph, cluster) if partition == "data-parallel" \
        else random_strategy(graph, cluster, seed=3)
    strategy = on_one_rank(split)
    training = Training(steps=5, warmup=0, seed=5, data=DataFeed(DataSource.DATASET, shuffle))
    spec = LaunchSpec(graph, strategy, 1, training)
    plan = compile_plan(graph, strategy, 1)
    cpu = torch.device("cpu")
    program = RankProgram(plan, 0, Comm(0, [], cpu), seed=5, dtype=torch.float64,
                          data=rank_feed(spec, plan, 0, torch.float64, cpu))
    losses = [program.step(step).loss_share for step in range(5)]
    assert losses == pytest.approx(plain_losses(DIGITS, 5, 8, seed=5, shuffle=shuffle),
                                   rel=1e-9)


def test_the_order_of_items_is_torchs_permutation_per_epoch():
    """The documented order, past the first epoch: the batch sampler's items are
    torch.randperm's seeded seed + epoch (the last partial batch left out)."""
    order = ItemOrder(length=10, batch=3, shuffle=True, seed=7)
    got = list(order.batches(7, [0, 2]))
    expected = []
    for step in range(7):
        epoch, k = divmod(step, 3)
        perm = torch.randperm(10, generator=torch.Generator().manual_seed(7 + epoch))
        expected.append([int(perm[3 * k]), int(perm[3 * k + 2])])
    assert got == expected
    assert list(ItemOrder(10, 3, False, 7).batches(4, [1])) == [[1], [4], [7], [1]]


# -- launches on 2 CPU ranks ------------------------------------------------------------


def launch(tmp_path, *args, env=None):
    """``flextui launch`` of the digits model on 2 CPU ranks; the run log's records."""
    log = tmp_path / "run.ffrun"
    proc = subprocess.run([sys.executable, "-m", "flextui", "launch", "-m", str(DIGITS),
                           "--nproc-per-node", "2", "--run-log", str(log), *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    records = read_run_log(log).records
    pids = [r.pid for r in records if isinstance(r, Start)]
    assert len(pids) == 2 and wait_gone(pids) == []
    return proc, records


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("partition", ["data-parallel", "random"])
def test_launch_check_on_the_dataset_equals_a_plain_loop(tmp_path, partition, shuffle):
    """The ranks' per-step losses (summed over ranks) and the referee's equal a plain
    PyTorch loop over the same items, at the check's batch (2: the strategy's least)."""
    proc, records = launch(tmp_path, "--strategy", partition, "--check",
                           *(["--shuffle"] if shuffle else []))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    assert "check passed" in proc.stdout
    expected = plain_losses(DIGITS, 3, 2, shuffle=shuffle)
    checks = [r for r in records if isinstance(r, Check)]
    assert len(checks) == 2
    for check in checks:
        assert list(check.losses) == pytest.approx(expected, rel=1e-9)
        assert list(check.reference_losses) == pytest.approx(expected, rel=1e-9)


def read_items(path):
    """(indices, PIDs) a process read, from its data log."""
    rows = [line.split() for line in path.read_text().splitlines()]
    return [int(i) for i, _ in rows], {int(pid) for _, pid in rows}


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_each_rank_reads_only_its_sample_blocks_items(tmp_path):
    """Data parallel over 2 ranks, batch 8, shuffled: rank r reads items r*4 .. r*4+3 of
    each step's batch (through its DataLoader worker), the launcher the first
    step's to check them; no reader outlives the launch."""
    logs = tmp_path / "items"
    logs.mkdir()
    proc, records = launch(tmp_path, "--strategy", "data-parallel", "--steps", "3",
                           "--warmup", "1", "--shuffle", "--data-workers", "1",
                           env={"FLEXTUI_TEST_DATA_LOG": str(logs)})
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    order = torch.randperm(40, generator=torch.Generator().manual_seed(0)).tolist()
    ranks = {r.rank: r.pid for r in records if isinstance(r, Start)}
    readers = set()
    for rank in (0, 1):
        items, pids = read_items(logs / f"train-{rank}.txt")
        assert items == [order[8 * k + p] for k in range(4)
                         for p in range(4 * rank, 4 * rank + 4)]
        assert len(pids) == 1 and ranks[rank] not in pids  # its DataLoader worker read them
        readers |= pids
    assert read_items(logs / "train-launcher.txt")[0] == order[:8]
    assert sorted(p.name for p in logs.iterdir()) == ["train-0.txt", "train-1.txt",
                                                     "train-launcher.txt"]
    assert wait_gone(readers) == []
