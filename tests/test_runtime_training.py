"""The update a launch trains with (``--optimizer``, ``--lr-schedule``, ``--grad-clip``,
``--precision``): a rank's update equals torch's own optimizer, scheduler and
clip_grad_norm_ run by a plain loop written here, in one process and on two ranks."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flextui.cli import main
from flextui.cost.optimizers import OptimizerKind
from flextui.graph import full_region
from flextui.graph.kernels.synthetic import input_block
from flextui.graph.region import region_volume
from flextui.machine import load_named_cluster
from flextui.runtime.comm import Comm
from flextui.runtime.engine import RankProgram, kernel_seed, within
from flextui.runtime.metrics import Start, Steps
from flextui.runtime.optimizer import LrSchedule, Optimizer
from flextui.runtime.plan import compile_plan, index_bounds
from flextui.runtime.reference import forward_whole
from flextui.runtime.runlog import read_run_log
from flextui.runtime.spec import LaunchSpec, RunDtype, Training, lr_at
from flextui.runtime.values import StartingParameters
from flextui.runtime.worker import relative_error
from helpers import HANG_S
from module_loop import module_training
from processes import wait_gone
from runtime_models import small, strategy
from test_runtime_plan import on_one_rank

GPT_FILE = Path(__file__).with_name("torch_models") / "gpt2_decoder.py"


def warmup_cosine(warmup, total):
    """transformers' get_cosine_schedule_with_warmup's lambda, written out."""
    def factor(step):
        if step < warmup:
            return step / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))
    return factor


def warmup_linear(warmup, total):
    def factor(step):
        return step / warmup if step < warmup else (total - step) / (total - warmup)
    return factor


UPDATES = {
    "adamw-cosine-clip": (
        Optimizer(kind=OptimizerKind.ADAMW, lr=0.02, betas=(0.8, 0.99), eps=1e-7, weight_decay=0.1,
                  schedule=LrSchedule.COSINE, warmup_steps=1, total_steps=4, grad_clip=0.05),
        lambda ps: torch.optim.AdamW(ps, lr=0.02, betas=(0.8, 0.99), eps=1e-7,
                                     weight_decay=0.1),
        warmup_cosine(1, 4), 0.05),
    "sgd-linear-decay": (
        Optimizer(kind=OptimizerKind.SGD, lr=0.05, momentum=0.8, weight_decay=0.01,
                  schedule=LrSchedule.LINEAR, warmup_steps=2, total_steps=4),
        lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, weight_decay=0.01),
        warmup_linear(2, 4), None),
}


def torch_loop(graph, steps, make, schedule, clip, split):
    """The whole graph's forward (one block per op, but batch norm's sample blocks)
    trained by torch's optimizer ``make``, a LambdaLR of ``schedule`` and
    clip_grad_norm_: losses, parameters and the norms clipped."""
    start = StartingParameters(graph, 0)
    params = {name: start.block(name, full_region(p.shape), torch.float64).requires_grad_()
              for name, p in graph.parameters.items()}
    optimizer = make(list(params.values()))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    losses, norms = [], []
    bounds = index_bounds(graph)
    for step in range(steps):
        def data(op, step=step):
            return input_block(op, op.output_regions(full_region(op.space_shape))[0], 0, step,
                               torch.float64, bounds.get(op.index))
        loss = forward_whole(graph, params, data, kernel_seed(0, step), torch.float64, split)
        optimizer.zero_grad()
        loss.backward()
        if clip is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(list(params.values()), clip)))
        optimizer.step()
        scheduler.step()
        losses.append(float(loss.detach()))
    return losses, params, norms


@pytest.mark.parametrize("update", UPDATES)
def test_a_ranks_update_equals_torchs_optimizer_on_a_partitioned_strategy(update):
    """Every parameter in shards (boxes of the partition's blocks, all on one rank):
    4 steps of AdamW at a warmed-up cosine rate with the gradients clipped, or SGD with
    weight decay at a linear rate, equal torch.optim's on the whole parameters."""
    settings, make, schedule, clip = UPDATES[update]
    graph, cluster = small("mlp"), load_named_cluster("local-cpu-4")
    split = on_one_rank(strategy("random-1", graph, cluster))
    assert any(max(split[op.name].degrees) > 1 for op in graph.ops)
    plan = compile_plan(graph, split, 1)
    program = RankProgram(plan, 0, Comm(0, [], torch.device("cpu")), dtype=torch.float64,
                          optimizer=settings)
    losses = [program.step(step).loss_share for step in range(4)]
    expected, params, norms = torch_loop(graph, 4, make, schedule, clip, split)
    assert losses == pytest.approx(expected, rel=1e-9)
    assert clip is None or max(norms) > clip  # the clipping scaled the gradients
    for name, value in program.params.items():
        whole = params[name].detach()
        assert relative_error(value.detach(), whole[within(program.boxes[name],
                                                           full_region(whole.shape))]) < 1e-9
    assert [lr_at(Training(steps=3, warmup=1, lr=settings.lr, optimizer=settings.kind,
                           lr_schedule=settings.schedule,
                           warmup_steps=settings.warmup_steps), s) for s in range(4)] == \
        [settings.lr * schedule(s) for s in range(4)]


@pytest.mark.parametrize("name", ["data-parallel", "random-1", "random-3"])
def test_the_gradient_norm_counts_every_parameter_element_once(name):
    """Replicated elements on the lowest rank holding them, split ones where they lie:
    the ranks' cells cover each parameter once, each within its rank's box."""
    graph, cluster = small("mlp"), load_named_cluster("local-cpu-4")
    plan = compile_plan(graph, strategy(name, graph, cluster), 4)
    for param, per_rank in plan.norm_cells.items():
        seen = torch.zeros(graph.parameters[param].shape, dtype=torch.int64)
        for rank, cells in per_rank.items():
            box = plan.param_boxes[param][rank]
            for cell in cells:
                assert all(b0 <= c0 and c1 <= b1 for (c0, c1), (b0, b1) in zip(cell, box))
                seen[within(cell, full_region(seen.shape))] += 1
                assert region_volume(cell) > 0
        assert bool((seen == 1).all()), (name, param)


def test_the_update_travels_in_the_plan_and_old_run_logs_read_as_sgd():
    """A plan carries the update; a run log header written before it was kept reads as
    the run it was (SGD, constant, no clipping); a bad value in a plan names its field."""
    graph, cluster = small("mlp"), load_named_cluster("local-cpu-2")
    s = strategy("data-parallel", graph, cluster)
    training = Training(steps=3, dtype=RunDtype.FLOAT64, optimizer=OptimizerKind.ADAMW,
                        betas=(0.5, 0.6), eps=1e-6, weight_decay=0.2,
                        lr_schedule=LrSchedule.COSINE, warmup_steps=2, grad_clip=1.5)
    spec = LaunchSpec(graph, s, 2, training)
    assert LaunchSpec.decode(spec.encode(), "plan").training == training
    body = spec.to_dict()
    for key in ("optimizer", "weight_decay", "betas", "eps", "lr_schedule", "warmup_steps",
                "grad_clip"):
        del body["training"][key]
    old = LaunchSpec.from_dict(body, "log", record=True).training
    assert old == Training(steps=3, dtype=RunDtype.FLOAT64)
    assert old.update.kind == OptimizerKind.SGD and old.update.grad_clip is None
    body["training"]["betas"] = [0.9, 1.0]
    with pytest.raises(Exception, match="log: training: betas: must be numbers below 1"):
        LaunchSpec.from_dict(body, "log", record=True)


@pytest.mark.parametrize("args, said", [
    (["--optimizer", "sgd", "--betas", "0.9,0.99"],
     "--betas is not an option of --optimizer sgd: leave it out, or give --optimizer adamw"),
    (["--optimizer", "adamw", "--momentum", "0.5"],
     "--momentum is not an option of --optimizer adamw"),
    (["--optimizer", "adamw", "--betas", "0.9"],
     "--betas takes two numbers B1,B2 (e.g. 0.9,0.999), found '0.9'"),
    (["--optimizer", "adamw", "--betas", "0.9,x"], "--betas takes two numbers B1,B2"),
    (["--optimizer", "adamw", "--betas", "0.9,1"], "--betas must be numbers below 1"),
    (["--optimizer", "adamw", "--betas", "nan,0.9"], "--betas must be a finite number"),
    (["--optimizer", "adamw", "--eps", "-1"], "--eps must be a number >= 0"),
    (["--momentum", "1.5"], "--momentum must be a number <= 1, found 1.5"),
    (["--weight-decay", "-0.1"], "--weight-decay must be a number >= 0, found -0.1"),
    (["--grad-clip", "0"], "--grad-clip must be a number > 0"),
    (["--grad-clip", "nan"], "--grad-clip must be a finite number, found nan"),
    (["--warmup-steps", "-1"], "--warmup-steps must be a whole number >= 0, found -1"),
    (["--record-profile", "--precision", "fp64"],
     "--record-profile records the task times of a float32 run; leave out --precision fp64"),
    (["--record-profile", "--precision", "bf16"],
     "--record-profile records the task times of a float32 run; leave out --precision bf16"),
])
def test_a_bad_update_option_is_one_line_before_any_work(tmp_path, monkeypatch, capsys, args,
                                                         said):
    monkeypatch.chdir(tmp_path)
    code = main(["launch", "-m", "lenet", "--headless", *args])
    err = capsys.readouterr().err
    assert code == 2 and said in " ".join(err.split()), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_bf16_strategy_file_is_not_recorded_as_float32_task_times(tmp_path, capsys):
    path = tmp_path / "s.json"
    assert main(["show", "-m", "lenet", "-c", "local-cpu-2", "-s", "data-parallel",
                 "--export", str(path)]) == 0
    data = json.loads(path.read_text())
    data["precision"] = "bf16"
    path.write_text(json.dumps(data))
    capsys.readouterr()
    code = main(["launch", "-m", "lenet", "--nproc-per-node", "2", "--strategy", str(path),
                 "--record-profile", "--headless", "--profiles", str(tmp_path / "p")])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "trains in bf16; give --precision fp32" in err, err
    assert "Traceback" not in err


def step_losses(run):
    """Each step's loss: the ranks' shares of it summed, from the run log's records."""
    total: dict[int, float] = {}
    for r in run.records:
        if isinstance(r, Steps):
            assert len(r.losses) == r.count
            for i, loss in enumerate(r.losses):
                total[r.first + i] = total.get(r.first + i, 0.0) + loss
    return [total[s] for s in sorted(total)]


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_a_two_rank_adamw_launch_trains_as_torchs_own_loop(tmp_path):
    """flextui launch on 2 CPU ranks in float64 with AdamW, a warmed-up cosine rate and
    the global gradient norm clipped, under a strategy that splits some parameters and
    replicates others: every step's loss equals the module's own plain PyTorch loop
    (torch.optim.AdamW, LambdaLR, clip_grad_norm_) on the same batches."""
    log = tmp_path / "gpt.ffrun"
    proc = subprocess.run(
        [sys.executable, "-m", "flextui", "launch", "--model", str(GPT_FILE), "--strategy",
         "random", "--seed", "2", "--nproc-per-node", "2", "--precision", "fp64",
         "--optimizer", "adamw", "--lr", "0.01", "--betas", "0.85,0.98",
         "--weight-decay", "0.05", "--lr-schedule", "cosine", "--warmup-steps", "1",
         "--grad-clip", "0.5", "--warmup", "1", "--steps", "4", "--json", "--run-log",
         str(log)],
        cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    run = read_run_log(log)
    spec = run.header.spec
    assert spec.training.update == Optimizer(
        kind=OptimizerKind.ADAMW, lr=0.01, momentum=0.9, weight_decay=0.05, betas=(0.85, 0.98),
        eps=1e-8, schedule=LrSchedule.COSINE, warmup_steps=1, total_steps=5, grad_clip=0.5)
    plan = compile_plan(spec.graph, spec.strategy, 2)
    assert plan.syncs and any(len(boxes) == 2 and len(set(boxes.values())) == 2
                              for boxes in plan.param_boxes.values())  # replicas and shards
    norms: list[float] = []
    expected, _ = module_training(
        spec.graph, seed=2, steps=5, source=str(GPT_FILE),
        optimizer=lambda ps: torch.optim.AdamW(ps, lr=0.01, betas=(0.85, 0.98),
                                               weight_decay=0.05),
        schedule=warmup_cosine(1, 5), clip=0.5, norms=norms)
    assert max(norms) > 0.5  # the clipping scaled the gradients
    assert step_losses(run) == pytest.approx(expected, rel=1e-9)
    pids = [r.pid for r in run.records if isinstance(r, Start)]
    assert len(pids) == 2 and wait_gone(pids) == []


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
@pytest.mark.parametrize("model", [str(GPT_FILE), "mlp"])
def test_a_check_of_an_adamw_launch_compares_with_torchs_own_update(tmp_path, model):
    """launch --check with AdamW, a linear schedule after a warm-up and clipping: the
    referee (the user's module, or a built-in model's whole graph) is updated by
    torch.optim.AdamW, LambdaLR and clip_grad_norm_ with the run's settings, and the
    2 ranks equal it."""
    proc = subprocess.run(
        [sys.executable, "-m", "flextui", "launch", "--model", model, "--strategy", "random",
         "--nproc-per-node", "2", "--check", "--optimizer", "adamw", "--weight-decay", "0.1",
         "--lr-schedule", "linear", "--warmup-steps", "1", "--grad-clip", "0.05", "--json",
         "--run-log", str(tmp_path / "check.ffrun")],
        cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    result = json.loads(proc.stdout)
    assert result["equal"] and result["steps"] == 3, result
    run = read_run_log(tmp_path / "check.ffrun")
    assert run.header.spec.training.update.kind == OptimizerKind.ADAMW
    pids = [r.pid for r in run.records if isinstance(r, Start)]
    assert len(pids) == 2 and wait_gone(pids) == []
