"""Sharded training state in the runtime: on 2 and 4 gloo ranks, strategies that shard
parameters (stages 1 and 3 under data parallelism; stages 1 to 3 among op splits and
with recomputation) train as the whole graph does under torch.optim's AdamW with
clip_grad_norm_ and SGD (tests/runtime_sharded_cases.py), each rank keeping less
optimizer state (stage 3: and its part of the parameters between steps); the launch
plan carries the stages; the norm counts every element once."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flextui.errors import FlextuiError
from flextui.graph import full_region, region_volume
from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.runtime.metrics import Start
from flextui.runtime.plan import compile_plan
from flextui.runtime.runlog import read_run_log
from flextui.runtime.spec import LaunchSpec, Training
from flextui.strategy import ShardStage, builtin_strategy, random_strategy, save_strategy
from flextui.strategy.pipeline import Pipeline, Schedule
from flextui.strategy.shards import shard_numel
from helpers import HANG_S
from processes import torchrun_rows, wait_gone
from runtime_models import small, strategy
from runtime_sharded_cases import MODELS, STRATEGIES, UPDATES

RUNNER = Path(__file__).with_name("runtime_sharded_cases.py")


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
@pytest.mark.parametrize("ranks", [2, 4])
def test_sharded_strategies_train_as_torchs_optimizer_on_the_whole_graph(ranks):
    rows = torchrun_rows(RUNNER, ranks)
    assert len(rows) == ranks * len(MODELS) * len(UPDATES) * len(STRATEGIES)
    for row in rows:
        assert row["loss_error"] < 1e-9 and row["param_error"] < 1e-9, row
        assert row["state"] < row["unsharded"], row
        if row["strategy"] == "zero1-data-parallel":   # about 1/n of it, padded
            assert row["state"] <= row["unsharded"] / ranks + 2 * ranks, row
        if row["strategy"] == "zero3-data-parallel":   # and of the parameters too
            graph = small(row["model"])
            assert row["params_kept"] == sum(
                p.numel if name in graph.shared_parameters else shard_numel(p.numel, ranks)
                for name, p in graph.parameters.items()), row
        elif not row["strategy"].startswith("zero3-"):
            assert row["params_kept"] == row["params_whole"], row


def test_a_rank_counts_each_element_of_the_norm_once_sharded_or_not():
    """The cells in ``norm_cells`` and the ranks' parts of the sharded buckets cover each
    parameter's elements exactly once between them."""
    graph, cluster = small("mlp"), load_named_cluster("local-cpu-2")
    plan = compile_plan(graph, strategy("zero2-random-3", graph, cluster), 2)
    counted = {name: sum(region_volume(c) for cells in per_rank.values() for c in cells)
               for name, per_rank in plan.norm_cells.items()}
    for bucket in plan.buckets:
        if bucket[0].stage:
            for s in bucket:   # the parts of the group's ranks add up to its elements
                counted[s.param] += s.numel
    assert counted == {name: p.numel for name, p in graph.parameters.items()}
    assert all(s.stage for s in plan.syncs)
    # cells held by one rank: updated by it alone, and counted in its norm cells
    alone = [(name, rank, cell) for name, per_rank in plan.alone_cells.items()
             for rank, cells in per_rank.items() for cell in cells]
    assert alone and all(cell in plan.norm_cells[name][rank] for name, rank, cell in alone)
    assert shard_numel(9, 2) == 5 and shard_numel(8, 4) == 2


def test_the_launch_plan_carries_the_shard_stages():
    graph, cluster = small("mlp"), load_named_cluster("local-cpu-4")
    chosen = strategy("zero2-random-3", graph, cluster)
    again = LaunchSpec.decode(LaunchSpec(graph, chosen, 4, Training()).encode(), "plan")
    assert again.strategy == chosen and again.strategy.shards
    body = LaunchSpec(graph, chosen, 4, Training()).to_dict()
    name = next(iter(chosen.shards))
    body["strategy"][2][name] = {"shard": 9}
    with pytest.raises(FlextuiError, match=rf"plan: params\.{name}\.shard: .*<= 3"):
        LaunchSpec.from_dict(body, "plan")
    body["strategy"] += ["fp32", {}, {}]
    with pytest.raises(FlextuiError, match="found 6 items"):
        LaunchSpec.from_dict(body, "plan")
    assert full_region((2,)) == ((0, 2),)
    assert ShardStage.GRADIENTS.label == "optimizer state and gradients"


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_an_imported_decoder_at_stage_3_with_recomputation_equals_the_module(tmp_path):
    """The user's path with a Hugging Face-style model: the imported GPT-2 decoder under
    a random split, every parameter at stage 3 and every other op recomputed, launched
    with AdamW on 2 ranks, equals the module trained by plain PyTorch (--check)."""
    model = Path(__file__).with_name("torch_models") / "gpt2_decoder.py"
    graph, cluster = load_model(str(model)), load_named_cluster("local-cpu-2")
    chosen = random_strategy(graph, cluster, seed=1)
    ops = [op for op in graph.ops if op.type != "input"][::2]
    chosen = chosen.replace_all({op.name: chosen[op.name].with_recompute(True) for op in ops})
    chosen = chosen.with_shards(dict.fromkeys(graph.parameters, ShardStage.PARAMETERS))
    path = tmp_path / "s.json"
    save_strategy(path, chosen, graph, cluster)
    _checked_against_the_module(tmp_path, model, path, "--optimizer", "adamw")


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_an_imported_decoder_in_a_1f1b_pipeline_equals_the_module(tmp_path):
    """Pipelines against an independent referee: the imported GPT-2 decoder cut into
    two stages (model parallel) and 2 micro-batches under 1F1B, launched on 2 ranks,
    equals the module trained by plain PyTorch (--check)."""
    model = Path(__file__).with_name("torch_models") / "gpt2_decoder.py"
    graph, cluster = load_model(str(model)), load_named_cluster("local-cpu-2")
    chosen = builtin_strategy("model-parallel", graph, cluster).with_pipeline(
        Pipeline(2, Schedule.ONE_F_ONE_B))
    path = tmp_path / "s.json"
    save_strategy(path, chosen, graph, cluster)
    _checked_against_the_module(tmp_path, model, path)


def _checked_against_the_module(tmp_path, model, strategy, *flags):
    """``launch --check`` of ``strategy`` on 2 ranks passes against the module run by
    plain PyTorch, and its ranks are gone after."""
    log = tmp_path / "check.ffrun"
    proc = subprocess.run([sys.executable, "-m", "flextui", "launch", "-m", str(model),
                           "--nproc-per-node", "2", "--strategy", str(strategy), *flags,
                           "--check", "--run-log", str(log)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=HANG_S,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    assert "check passed: 2 ranks equal one process of the module" in proc.stdout
    pids = [r.pid for r in read_run_log(log).records if isinstance(r, Start)]
    assert len(pids) == 2 and wait_gone(pids) == []
