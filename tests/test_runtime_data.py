"""A model file's dataset(): what a launch trains on, in the documented order, equal to
a plain PyTorch loop over the same items (tests/data_loop.py); each rank reads only its
sample blocks' items; an item that does not fit the graph's inputs is one message."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from data_loop import plain_losses
from flextui.cli import main
from flextui.errors import FlextuiError
from flextui.graph.library import load_model, pytorch_model
from flextui.machine import load_named_cluster
from flextui.runtime.comm import Comm
from flextui.runtime.data import ItemOrder, rank_feed
from flextui.runtime.datafeed import DataFeed, DataSource
from flextui.runtime.engine import RankProgram
from flextui.runtime.metrics import Check, Evaluated, Start
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
    return launch_model(tmp_path, str(DIGITS), *args, env=env)


def launch_model(tmp_path, model, *args, env=None):
    """``flextui launch`` of ``model`` on 2 CPU ranks; the run log's records."""
    log = tmp_path / "run.ffrun"
    proc = subprocess.run([sys.executable, "-m", "flextui", "launch", "-m", model,
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


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_an_evaluation_pass_equals_the_plain_loops(tmp_path):
    """--eval-every 2 over 3 steps of batch 2 (the check's, float64) under the random
    strategy: after step 2, the mean loss over the 8 batches of dataset("val"), the
    ranks' shares summed, equals the plain loop's forward over the same items."""
    proc, records = launch(tmp_path, "--strategy", "random", "--check", "--eval-every", "2")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    losses, evaluations = plain_losses(DIGITS, 3, 2, eval_every=2)
    assert list(evaluations) == [2]
    shares = [r for r in records if isinstance(r, Evaluated)]
    assert sorted((r.rank, r.step) for r in shares) == [(0, 1), (1, 1)]
    assert sum(r.loss for r in shares) == pytest.approx(evaluations[2], rel=1e-9)
    checks = [r for r in records if isinstance(r, Check)]
    assert list(checks[0].losses) == pytest.approx(losses, rel=1e-9)  # training unchanged


def read_items(path):
    """(indices, PIDs) a process read, from its data log."""
    rows = [line.split() for line in path.read_text().splitlines()]
    return [int(i) for i, _ in rows], {int(pid) for _, pid in rows}


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_each_rank_reads_only_its_sample_blocks_items(tmp_path):
    """Data parallel over 2 ranks, batch 8, shuffled, evaluated after steps 2 and 4: rank
    r reads items r*4 .. r*4+3 of each step's batch and of each of the 2 batches of the
    validation split (through its DataLoader workers), the launcher the first batch of
    each split to check them; no reader outlives the launch."""
    logs = tmp_path / "items"
    logs.mkdir()
    proc, records = launch(tmp_path, "--strategy", "data-parallel", "--steps", "3",
                           "--warmup", "1", "--shuffle", "--data-workers", "1",
                           "--eval-every", "2", "--json",
                           env={"FLEXTUI_TEST_DATA_LOG": str(logs)})
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    assert [e["step"] for e in json.loads(proc.stdout)["evaluations"]] == [2, 4]
    order = torch.randperm(40, generator=torch.Generator().manual_seed(0)).tolist()
    ranks = {r.rank: r.pid for r in records if isinstance(r, Start)}
    readers = set()
    for rank in (0, 1):
        mine = range(4 * rank, 4 * rank + 4)
        items, pids = read_items(logs / f"train-{rank}.txt")
        assert items == [order[8 * k + p] for k in range(4) for p in mine]
        assert len(pids) == 1 and ranks[rank] not in pids  # its DataLoader worker read them
        val, val_pids = read_items(logs / f"val-{rank}.txt")
        assert val == [8 * k + p for k in range(2) for p in mine] * 2
        assert len(val_pids) == 2 and ranks[rank] not in val_pids  # a worker each pass
        readers |= pids | val_pids
    assert read_items(logs / "train-launcher.txt")[0] == order[:8]
    assert read_items(logs / "val-launcher.txt")[0] == list(range(8))
    assert len(list(logs.iterdir())) == 6
    assert wait_gone(readers) == []


# -- refusals: one message, exit 2, before any rank starts ------------------------------

SMALL = """
import torch
from torch import nn

BATCH_SIZE = 4


def model():
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 10))


def example_inputs(batch_size):
    return (torch.randn(batch_size, 1, 4, 4),)


class Items(torch.utils.data.{base}):
    def __len__(self):
        return {length}

    def __getitem__(self, index):
        return {item}

    def __iter__(self):
        return iter([])


def dataset(split="train"):
    return Items()
"""
#: a model file's dataset, what is wrong with it, and what the refusal says
REFUSED = {
    "a sample of another shape": (
        "Dataset", 8, "(torch.zeros(1, 4, 5), 0)", (),
        "dataset('train') item 0, field 0 (input 'input'): expected float [1, 4, 4], found "
        "torch.float32 [1, 4, 5]"),
    "no label": (
        "Dataset", 8, "torch.zeros(1, 4, 4)", (),
        "item 0: expected 2 fields ('input' float [1, 4, 4], 'labels' integer []), found 1"),
    "a float label": (
        "Dataset", 8, "(torch.zeros(1, 4, 4), 0.5)", (),
        "item 0, field 1 (the label, input 'labels'): expected integer [], found "
        "torch.float32 []"),
    "a class past the logits": (
        "Dataset", 8, "(torch.zeros(1, 4, 4), index + 7)", (),
        "item 3, field 1 (the label, input 'labels'): values must lie in [0, 10)"),
    "an item that raises": (
        "Dataset", 8, "(torch.zeros(1, 4, 4), [0][index])", (),
        "dataset('train')[1] raised IndexError"),
    "fewer items than a batch": (
        "Dataset", 3, "(torch.zeros(1, 4, 4), 0)", (),
        "dataset('train') has 3 items, fewer than one batch of 4"),
    "epochs that are all warm-up": (
        "Dataset", 9, "(torch.zeros(1, 4, 4), 0)", ("--epochs", "1", "--warmup", "2"),
        "--epochs 1 is 2 steps of batch 4, no more than --warmup 2"),
    "an iterable dataset": (
        "IterableDataset", 8, "None", (),
        "dataset('train') returned Items, not a map-style Dataset"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_dataset_that_does_not_fit_is_refused_before_any_rank_starts(case, tmp_path, capsys):
    base, length, item, args, said = REFUSED[case]
    path = tmp_path / "small.py"
    path.write_text(SMALL.format(base=base, length=length, item=item))
    log = tmp_path / "run.ffrun"
    span = () if "--epochs" in args else ("--steps", "1")
    code = main(["launch", "-m", str(path), "--nproc-per-node", "2", "--run-log", str(log),
                 *span, "--warmup", "0", *args])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and said in err and "Traceback" not in err, err
    assert not log.exists()  # no rank started


def test_shuffling_synthetic_data_is_refused(capsys):
    code = main(["launch", "-m", "mlp", "--shuffle"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "defines no dataset" in err and "leave them out" in err, err


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_an_item_that_does_not_fit_later_fails_the_run_naming_it(tmp_path):
    """Item 6 (step 1, rank 1's half of the batch) is of another shape: the launcher
    checked step 0's items only, so rank 1 finds it, says which, and ends without a
    traceback of its own; the launch fails naming the rank and the item."""
    path = tmp_path / "late.py"
    path.write_text(SMALL.format(base="Dataset", length=16,
                                 item="(torch.zeros(1, 4, 4 if index < 6 else 5), 0)"))
    log = tmp_path / "run.ffrun"
    proc = subprocess.run([sys.executable, "-m", "flextui", "launch", "-m", str(path),
                           "--nproc-per-node", "2", "--steps", "3", "--warmup", "0",
                           "--run-log", str(log), "--headless"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    run = read_run_log(log)
    assert wait_gone([r.pid for r in run.records if isinstance(r, Start)]) == []
    said = " ".join(proc.stdout.split())
    assert proc.returncode == 1, proc.stderr[-3000:] + proc.stdout
    assert "rank 1 on localhost failed: DataError: model 'late': dataset('train') item 6, " \
        "field 0 (input 'input'): expected float [1, 4, 4], found torch.float32 [1, 4, 5]" \
        in said
    assert not [line for rank, line in run.output if rank == 1 and "Traceback" in line]


def test_a_plan_carries_its_data_and_a_run_log_without_one_reads():
    """The plan says what the ranks train on, checked where it is read; a run log's
    header written before datasets (no ``data``) reads as the synthetic data."""
    graph = load_model(str(DIGITS))
    strategy = builtin_strategy("data-parallel", graph, load_named_cluster("local-cpu-2"))
    feed = DataFeed(DataSource.DATASET, shuffle=True, workers=3)
    spec = LaunchSpec(graph, strategy, 2, Training(data=feed))
    assert LaunchSpec.decode(spec.encode(), "plan").training.data == feed
    body = spec.to_dict(code=True)
    body["training"]["data"]["workers"] = -1
    with pytest.raises(FlextuiError, match=r"plan: training.data.workers: expected a whole "
                                           r"number >= 0, found -1"):
        LaunchSpec.from_dict(body, "plan")
    header = spec.to_dict()  # what a run log records
    del header["training"]["data"]
    assert LaunchSpec.from_dict(header, "log", record=True).training.data == DataFeed()


def test_evaluating_a_model_with_dropout_is_refused(tmp_path, capsys):
    """The evaluation runs a training step's forward: dropout would stay on."""
    path = tmp_path / "dropped.py"
    path.write_text(SMALL.format(base="Dataset", length=8, item="(torch.zeros(1, 4, 4), 0)")
                    .replace("nn.Flatten(), nn.Linear", "nn.Flatten(), nn.Dropout(0.5), nn.Linear"))
    code = main(["launch", "-m", str(path), "--steps", "1", "--eval-every", "1"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "--eval-every: the evaluation runs the forward pass of a training " \
        "step" in err and "would run in training mode" in err, err


# -- a .npy of token ids for a causal language model ------------------------------------


@pytest.mark.slow
@pytest.mark.vision
@pytest.mark.xdist_group("gloo")
def test_a_token_file_trains_a_causal_lm_as_a_plain_loop(tmp_path):
    """hf:gpt2 (sequences of 8) on --data tokens.npy, one stream of 320 ids read as 40
    windows, shuffled, under a random strategy on 2 ranks: the ranks' losses equal the
    module trained by a plain loop on window rows in the documented order."""
    pytest.importorskip("transformers")
    tokens = np.random.default_rng(0).integers(0, 512, size=320, dtype=np.uint16)
    np.save(tmp_path / "tokens.npy", tokens)
    proc, records = launch_model(tmp_path, "hf:gpt2", "-o", "seq_len=8", "-b", "4",
                                 "--strategy", "random", "--seed", "2", "--check", "--shuffle",
                                 "--data", "tokens.npy")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    batch = read_run_log(tmp_path / "run.ffrun").header.spec.graph.batch_size
    windows = torch.from_numpy(tokens.astype(np.int64)).view(40, 8)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(2)
        module = pytorch_model("hf:gpt2", {"seq_len": 8, "batch_size": batch}).module()
    module = module.double()
    sgd = torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9)
    order = torch.randperm(40, generator=torch.Generator().manual_seed(2))
    expected = []
    for step in range(3):
        ids = windows[order[step * batch:(step + 1) * batch]]
        loss = module(ids, ids)
        sgd.zero_grad()
        loss.backward()
        sgd.step()
        expected.append(float(loss.detach()))
    for check in (r for r in records if isinstance(r, Check)):
        assert list(check.losses) == pytest.approx(expected, rel=1e-9)


def test_a_token_file_is_refused_for_what_it_cannot_feed(tmp_path, capsys):
    """A model whose forward is not a causal LM's, a file that is not token ids."""
    np.save(tmp_path / "floats.npy", np.zeros(64, dtype=np.float32))
    np.save(tmp_path / "ids.npy", np.zeros(64, dtype=np.int32))
    for model, data, said in [
            (str(DIGITS), "ids.npy", "--data gives token ids to a causal language model, "
             "whose forward takes input_ids and labels"),
            ("mlp", "ids.npy", "model 'mlp' is flextui's own"),
            ("hf:gpt2", "floats.npy", "floats.npy: expected token ids, integers in one array "
             "[tokens] or a sequence per row [N, 8], found float32 [64]")]:
        code = main(["launch", "-m", model, "-o", "seq_len=8", "--data", str(tmp_path / data),
                     "--steps", "1"] if model == "hf:gpt2" else
                    ["launch", "-m", model, "--data", str(tmp_path / data), "--steps", "1"])
        err = " ".join(capsys.readouterr().err.split())
        assert code == 2 and said in err and "Traceback" not in err, err


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_epochs_go_on_in_each_epochs_own_order_as_a_plain_loop(tmp_path):
    """--epochs 2 over 40 items of batch 8: 10 steps, the warm-up among them, the second
    epoch in its own permutation; every step's loss as a plain loop's (float64)."""
    proc, _ = launch(tmp_path, "--epochs", "2", "--warmup", "1", "--shuffle", "--precision",
                     "fp64", "--strategy", "random", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    rows = json.loads(proc.stdout)["per_step"]
    assert [row["step"] for row in rows] == list(range(10))
    assert [row["loss"] for row in rows] == pytest.approx(
        plain_losses(DIGITS, 10, 8, shuffle=True), rel=1e-9)


@pytest.mark.parametrize("args, said", [
    (["-m", "mlp", "--epochs", "2"], "--epochs counts passes over your data"),
    (["-m", str(DIGITS), "--epochs", "0"], "--epochs"),
    (["-m", str(DIGITS), "--epochs", "2", "--steps", "3"], "not allowed with argument"),
])
def test_epochs_are_refused_without_data_or_beside_steps(args, said, tmp_path, capsys):
    try:
        code = main(["launch", *args, "--nproc-per-node", "2", "--run-log",
                     str(tmp_path / "run.ffrun")])
    except SystemExit as stopped:  # argparse's refusal of two exclusive options
        code = stopped.code
    assert code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert said in err and "Traceback" not in err, err
    assert not (tmp_path / "run.ffrun").exists()
