"""``flextui export --format torch``: the plan a strategy becomes, trained by the user's
own loop (tests/export_loop.py, plain PyTorch under torch.distributed.run, gloo) on 2 and
4 CPU ranks against the same loop in one process; and the strategies it refuses."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import export_loop
from flextui.cli import main
from flextui.graph.library import load_model, model_source
from flextui.machine import load_named_cluster
from flextui.runtime.export_plan import mesh_plan
from flextui.runtime.export_torch import torch_module_text
from flextui.runtime.export_types import LayerPlan, Layout, TensorParallelStyle
from flextui.strategy import ParallelConfig, ShardStage, builtin_strategy, save_strategy
from flextui.strategy.builtins import split_dims
from flextui.strategy.pipeline import Pipeline, Schedule
from helpers import HANG_S
from processes import end, wait_gone

HERE = Path(__file__).parent
MODEL = str(HERE / "torch_models" / "residual_mlp.py")
STEPS = 4
#: measured: the ranks' losses differ from one process's by at most 3e-16 (float64:
#: DTensor's and gloo's sums in another order); the bound leaves room for other orders
RELATIVE = 1e-12


@pytest.fixture(scope="module")
def graph():
    return load_model(model_source(MODEL))


def strategy(graph, devices: int, split: dict[str, dict[int, int]]):
    """Data parallel on ``devices`` ranks, but the ops in ``split`` split as given (dim
    index: degree), on devices from 0 in order."""
    cluster = load_named_cluster(f"local-cpu-{devices}")
    base = builtin_strategy("data-parallel", graph, cluster)
    return base.replace_all({name: split_dims(graph.op(name), degrees)
                             for name, degrees in split.items()}), cluster


COLUMNS, TENSOR, SEQUENCE = {0: 2, 2: 2}, {2: 2}, {0: 2, 1: 2}
#: name: (devices, tensor-parallel degree, split ops). tensor: every Linear layer whose
#: out-features 2 divides split 2 ways, the rest whole (each split layer's output
#: gathered); mix, on a 2 x 2 mesh: the first block's layers split as Megatron does (its
#: gelu split alike, the second layer takes the row split), the second block's first
#: layer alone, tanh along the sequence and the loss on device 0 (not kept: the plan
#: runs them where their inputs are); sequence: Megatron's sequence parallelism on a
#: 2 x 2 mesh, the residual stream and the norm split along the sequence
CASES = {
    "data": (2, 1, {}),
    "tensor": (2, 2, dict.fromkeys(("embed", "blocks.0.up", "blocks.0.down", "blocks.1.up",
                                    "blocks.1.down"), TENSOR)),
    "mix": (4, 2, {"blocks.0.up": COLUMNS, "blocks.0.gelu": COLUMNS, "blocks.1.up": COLUMNS,
                   "tanh": SEQUENCE, "cross_entropy_loss": {}}),
    "sequence": (4, 2, {"embed": COLUMNS, "tanh": SEQUENCE, "blocks.0.up": COLUMNS,
                        "blocks.0.gelu": COLUMNS, "blocks.0.add": SEQUENCE,
                        "blocks.1.up": COLUMNS, "blocks.1.gelu_1": COLUMNS,
                        "blocks.1.add_1": SEQUENCE, "norm": SEQUENCE}),
}
WHOLE, FEATURES, ALONG = Layout.WHOLE, Layout.FEATURES, Layout.SEQUENCE
COLWISE, ROWWISE = TensorParallelStyle.COLWISE, TensorParallelStyle.ROWWISE


def test_mix_plan_splits_columns_then_rows(graph):
    plan = mesh_plan(graph, strategy(graph, 4, CASES["mix"][2])[0], 4)
    assert (plan.data, plan.tensor) == (2, 2)
    assert plan.layers == (LayerPlan("blocks.0.up", COLWISE, WHOLE, FEATURES),
                           LayerPlan("blocks.0.down", ROWWISE, FEATURES, WHOLE),
                           LayerPlan("blocks.1.up", COLWISE, WHOLE, WHOLE))
    assert plan.followers == ("tanh", "cross_entropy_loss")
    assert "#     'tanh', 'cross_entropy_loss'\n" in torch_module_text(plan)


def test_tensor_plan_gathers_for_the_whole_ops_after_each_layer(graph):
    plan = mesh_plan(graph, strategy(graph, 2, CASES["tensor"][2])[0], 2)
    assert (plan.data, plan.tensor, plan.followers) == (1, 2, ())
    assert plan.layers == tuple(LayerPlan(name, COLWISE, WHOLE, WHOLE) for name in (
        "embed", "blocks.0.up", "blocks.0.down", "blocks.1.up", "blocks.1.down"))


def test_sequence_plan_splits_the_residual_stream_along_the_sequence(graph):
    plan = mesh_plan(graph, strategy(graph, 4, CASES["sequence"][2])[0], 4)
    assert (plan.data, plan.tensor, plan.followers) == (2, 2, ())
    assert plan.layers == (
        LayerPlan("embed", COLWISE, WHOLE, ALONG),
        LayerPlan("blocks.0.up", COLWISE, ALONG, FEATURES),
        LayerPlan("blocks.0.down", ROWWISE, FEATURES, ALONG),
        LayerPlan("blocks.1.up", COLWISE, ALONG, FEATURES),
        LayerPlan("blocks.1.down", ROWWISE, FEATURES, ALONG),
        LayerPlan("norm", TensorParallelStyle.SEQUENCE, ALONG, ALONG),
        LayerPlan("head", TensorParallelStyle.GATHER, ALONG, WHOLE))


def export(capsys, tmp_path, graph, case: str) -> tuple[int, str, Path]:
    devices, _, split = CASES[case]
    chosen, cluster = strategy(graph, devices, split)
    path, plan = tmp_path / f"{case}.json", tmp_path / f"{case}_plan.py"
    save_strategy(path, chosen, graph, cluster)
    code = main(["export", "--format", "torch", str(path), "--model", MODEL, "-o", str(plan)])
    return code, capsys.readouterr().err, plan


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")   # as the other tests that start gloo ranks
@pytest.mark.parametrize("case", CASES)
def test_exported_plan_trains_in_the_users_loop_as_one_process(capsys, tmp_path, graph, case):
    code, err, plan = export(capsys, tmp_path, graph, case)
    assert code == 0 and err.startswith(f"wrote {plan}: a "), err
    assert imported_packages(plan.read_text()) == {"torch"}
    devices, tensor, _ = CASES[case]
    ranks = run_loop(plan, devices, tmp_path / "out")
    one = export_loop.train(MODEL, None, STEPS)
    for rank in ranks:
        assert rank["losses"] == ranks[0]["losses"]
        assert all(abs(a - b) <= RELATIVE * abs(b) for a, b in zip(rank["losses"], one["losses"])), \
            (rank["losses"], one["losses"])
    hidden = one["shapes"]["blocks.0.up.weight"][0]
    assert ranks[0]["shapes"]["blocks.0.up.weight"][0] == hidden // tensor


def imported_packages(text: str) -> set[str]:
    names = [alias.name for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Import)
             for alias in node.names]
    names += [node.module or "" for node in ast.walk(ast.parse(text))
              if isinstance(node, ast.ImportFrom)]
    return {name.split(".")[0] for name in names}


def run_loop(plan: Path, devices: int, out: Path) -> list[dict]:
    """The loop on ``devices`` ranks; every process of it gone after, by its PID."""
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    agent = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                              f"--nproc-per-node={devices}", str(HERE / "export_loop.py"),
                              MODEL, str(plan), str(STEPS), str(out)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
    try:
        said, _ = agent.communicate(timeout=HANG_S)  # a hang, not slow
    finally:
        workers = [json.loads(p.read_text())["pid"] for p in out.glob("rank*.json")]
        end([agent.pid, *workers])
    assert agent.returncode == 0, said[-3000:]
    assert wait_gone([agent.pid, *workers]) == []
    assert len(workers) == devices
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(devices)]


def refused(capsys, tmp_path, graph, configs: dict[str, ParallelConfig], devices: int = 4,
            model: str = MODEL, shards: dict[str, ShardStage] | None = None):
    cluster = load_named_cluster(f"local-cpu-{devices}")
    base = builtin_strategy("data-parallel", graph, cluster)
    path, plan = tmp_path / "s.json", tmp_path / "plan.py"
    save_strategy(path, base.replace_all(configs).with_shards(shards or {}), graph, cluster)
    code = main(["export", str(path), "--model", model, "-o", str(plan)])
    out, err = capsys.readouterr()
    assert (code, out, plan.exists()) == (2, "", False)
    assert err.startswith(f"flextui: error: cannot export {path} as a DeviceMesh plan: op ")
    assert "Traceback" not in err and err.count("\n") == 1
    return err


def test_refuses_a_layer_on_a_device_subset(capsys, tmp_path, graph):
    head = graph.op("head")
    err = refused(capsys, tmp_path, graph, {"head": ParallelConfig((2, 1, 1), (2, 3))})
    assert f"op {head.name!r} runs on devices 2, 3 only, of 4" in err


def test_refuses_a_recomputed_layer(capsys, tmp_path, graph):
    data_parallel = builtin_strategy("data-parallel", graph, load_named_cluster("local-cpu-4"))
    err = refused(capsys, tmp_path, graph,
                  {"blocks.0.up": data_parallel["blocks.0.up"].with_recompute(True)})
    assert "op 'blocks.0.up' is recomputed, which a DeviceMesh plan does not express" in err


def test_refuses_a_sharded_parameter(capsys, tmp_path, graph):
    err = refused(capsys, tmp_path, graph, {},
                  shards={"blocks.1.down.weight": ShardStage.GRADIENTS})
    assert "op 'blocks.1.down': its parameter 'blocks.1.down.weight' has its training state " \
        "sharded (stage 2), which a DeviceMesh plan does not express" in err


def test_refuses_micro_batches(capsys, tmp_path, graph):
    cluster = load_named_cluster("local-cpu-2")
    path, plan = tmp_path / "s.json", tmp_path / "plan.py"
    save_strategy(path, builtin_strategy("data-parallel", graph, cluster).with_pipeline(
        Pipeline(2, Schedule.ONE_F_ONE_B)), graph, cluster)
    code = main(["export", str(path), "--model", MODEL, "-o", str(plan)])
    out, err = capsys.readouterr()
    assert (code, out, plan.exists()) == (2, "", False)
    assert err == (f"flextui: error: cannot export {path} as a DeviceMesh plan: the strategy "
                   "cuts each batch into 2 micro-batches, 1f1b, which a DeviceMesh plan does "
                   "not express: run the strategy with `flextui launch`, or export it without "
                   "micro-batches and pipeline the stages in your loop "
                   "(torch.distributed.pipelining)\n")


def test_refuses_two_tensor_parallel_degrees(capsys, tmp_path, graph):
    err = refused(capsys, tmp_path, graph, {
        "blocks.0.up": split_dims(graph.op("blocks.0.up"), {0: 2, 2: 2}),
        "blocks.1.up": split_dims(graph.op("blocks.1.up"), {2: 4})})
    assert "op 'blocks.1.up' splits its out-features 4 ways but op 'blocks.0.up' 2" in err


def test_refuses_a_layer_split_along_the_sequence(capsys, tmp_path, graph):
    err = refused(capsys, tmp_path, graph, {"embed": split_dims(graph.op("embed"), {0: 2, 1: 2})})
    assert "op 'embed' splits its dim 'd1' 2 ways" in err


def test_refuses_a_norm_along_the_sequence_after_whole_layers(capsys, tmp_path, graph):
    err = refused(capsys, tmp_path, graph, {"blocks.0.up": split_dims(graph.op("blocks.0.up"),
                                                                      COLUMNS),
                                            "norm": split_dims(graph.op("norm"), SEQUENCE)})
    assert "op 'norm' splits the sequence (dim 'd1') but cannot be SequenceParallel: its " \
        "input is not split along the sequence in the plan" in err


def test_refuses_blocks_out_of_the_mesh_order(capsys, tmp_path, graph):
    err = refused(capsys, tmp_path, graph,
                  {"blocks.0.up": ParallelConfig((2, 1, 2), (0, 2, 1, 3))})
    assert "op 'blocks.0.up' places its blocks on devices 0, 2, 1, 3" in err


def test_refuses_a_non_linear_layer_split_along_its_weights(capsys, tmp_path):
    model = str(HERE / "torch_models" / "causal_encoder.py")
    graph = load_model(model_source(model))
    embed = next(op for op in graph.ops if op.type == "embedding")
    err = refused(capsys, tmp_path, graph, {embed.name: split_dims(embed, {0: 2, 2: 2})},
                  model=model)
    assert f"op {embed.name!r} (embedding op) is split 2 ways along its weights" in err


def test_refuses_a_batch_norm_over_smaller_blocks_than_the_plans(capsys, tmp_path):
    model = str(HERE / "torch_models" / "dropout_norm.py")
    graph = load_model(model_source(model))
    err = refused(capsys, tmp_path, graph, {"5": split_dims(graph.op("5"), {0: 2, 1: 2})},
                  model=model)
    assert "op '1' is a batch norm, its statistics over its block of samples: the strategy " \
        "splits samples 4 ways, a plan on the 2 x 2 mesh 2 ways (dp)" in err


def test_refuses_a_library_graph(capsys, tmp_path):
    code = main(["export", "data-parallel", "--cluster", "local-cpu-2", "--model", "mlp"])
    _, err = capsys.readouterr()
    assert code == 2 and "is flextui's own graph, not a PyTorch module" in err


def test_prints_the_plan_without_output(capsys, tmp_path, graph):
    chosen, cluster = strategy(graph, 2, {})
    save_strategy(tmp_path / "dp.json", chosen, graph, cluster)
    code = main(["export", str(tmp_path / "dp.json"), "--model", MODEL])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    compile(out, "plan.py", "exec")
    assert "MESH_SHAPE = (2,)\nMESH_DIM_NAMES = ('dp',)\n" in out
    assert "    replicate(module, mesh=device_mesh)\n" in out


def test_export_needs_the_model(capsys, tmp_path):
    code = main(["export", str(tmp_path / "best.json")])
    _, err = capsys.readouterr()
    assert code == 2 and err == ("flextui: error: give --model, the model file the strategy "
                                 "was made for: the plan names its layers (e.g. --model "
                                 "model.py)\n")
