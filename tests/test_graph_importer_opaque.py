"""``--opaque``: what the importer cannot map op by op (here a grouped convolution and
cumulative sums, an LSTM) becomes opaque ops that run the module's own nodes, named
after their module, split by samples only when the region is batch-wise, costed by the
work they do, so the model still shows, searches, computes the module's loss (float64
too) and trains on ranks as one process does."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flextui.cli import main
from flextui.cost.analytic import AnalyticCostModel
from flextui.graph import full_region
from flextui.graph.dims import DimKind
from flextui.graph.library import load_model, pytorch_model
from flextui.machine import load_named_cluster
from flextui.runtime.metrics import Start
from flextui.runtime.reference import forward_whole
from flextui.runtime.runlog import read_run_log
from flextui.runtime.values import StartingParameters
from helpers import HANG_S
from processes import wait_gone

MODELS = Path(__file__).with_name("torch_models")
NET = MODELS / "grouped_cumsum.py"
LSTM = MODELS / "lstm_classifier.py"
POSITIONS = MODELS / "positions_cumsum.py"
LLAMA = MODELS / "hf_llama.py"


def test_without_opaque_the_unmappable_ops_are_refused(capsys):
    assert main(["show", "--model", str(NET)]) == 2
    err = capsys.readouterr().err
    assert "grouped convolution" in err and "aten.cumsum.default" in err


def test_each_unmappable_region_becomes_one_batch_wise_opaque_op():
    graph = load_model(str(NET), opaque=True)
    opaque = [op for op in graph.ops if op.type == "opaque"]
    assert len(opaque) == 1
    (op,) = opaque
    assert [n.rsplit("_", 1)[0] for n in op.attrs["nodes"]] == ["conv2d", "cumsum"]
    assert op.attrs["batchwise"] and op.space[0].kind == DimKind.SAMPLE
    assert [p.name for p in op.params] == [f"{op.name}.p0", f"{op.name}.p1"]
    assert graph.meta["module_params"][f"{op.name}.p0"] == "grouped.weight"
    # the grouped convolution's: batch 4, 8 output channels of 2 inputs each, 3x3 on 8x8,
    # a multiply-add 2 FLOPs (torch's counter leaves the cumulative sum out)
    assert op.attrs["flops"] == 2 * 4 * 8 * 8 * 8 * 2 * 9


def test_a_region_that_mixes_samples_is_not_split(monkeypatch):
    monkeypatch.syspath_prepend(str(MODELS))
    graph = load_model("grouped_cumsum:mixing", opaque=True)
    (op,) = [op for op in graph.ops if op.type == "opaque"]
    assert "cumsum_1" in op.attrs["nodes"]
    assert not op.attrs["batchwise"] and op.space[0].kind is None


@pytest.mark.parametrize("model, shape", [
    (NET, (4, 3, 8, 8)), (LSTM, (4, 5, 6)), (POSITIONS, (4, 5, 8)), ("positions_cumsum:masked", (4, 5, 8)),
    pytest.param(LLAMA, (2, 8), marks=pytest.mark.vision)],
    ids=["grouped_cumsum", "lstm", "positions", "masked", "llama"])
def test_the_opaque_graph_computes_the_modules_loss_in_float64(model, shape, monkeypatch):
    """The LSTM's region makes its first state with zeros(dtype=float32): in float64 it
    must make it in float64. The positions model's regions read positions and heads,
    which the graph holds as views of tensors; the masked one's read a bool mask another
    region made, and Llama's rotary tables come from positions alone: each region that
    reads them makes them again, in its own dtype."""
    monkeypatch.syspath_prepend(str(MODELS))
    if model == LLAMA:
        pytest.importorskip("transformers")
    graph = load_model(str(model), opaque=True)
    start = StartingParameters(graph, seed=5)
    params = {name: start.block(name, full_region(p.shape), torch.float64)
              for name, p in graph.parameters.items()}
    x = torch.randn(*shape, dtype=torch.float64) if model != LLAMA else \
        torch.randint(0, 50, shape)
    labels = torch.randint(0, 10, shape[:1])
    (first,) = [op.name for op in graph.ops if op.type == "input" and op.name != "labels"]
    data = {first: x, "labels": labels}
    found = forward_whole(graph, params, lambda op: data[op.name], seed=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        module = pytorch_model(str(model)).make().double()
    expected = torch.nn.functional.cross_entropy(module(x), labels)
    # Llama computes its rotary tables in float32 whatever its dtype; the graph in float64
    rel = 1e-8 if model == LLAMA else 1e-9
    assert float(found.detach()) == pytest.approx(float(expected.detach()), rel=rel)


def lstm_matmul_flops(batch, steps, width, hidden, layers):
    """An LSTM's matrix products by hand: per step and layer x W_ih^T and h W_hh^T, four
    gates wide, a multiply-add 2 FLOPs."""
    return steps * sum(2 * batch * 4 * hidden * ((width if layer == 0 else hidden) + hidden)
                       for layer in range(layers))


def test_an_opaque_lstm_is_named_after_it_and_costs_the_work_it_does():
    graph = load_model(str(LSTM), opaque=True)
    (op,) = [op for op in graph.ops if op.type == "opaque"]
    assert op.name == "lstm"
    whole = full_region(op.space_shape)
    flops = lstm_matmul_flops(batch=4, steps=5, width=6, hidden=8, layers=2)  # its sizes
    assert op.flops(whole) == (flops, 2 * flops)
    # its kernels read and write more than its operands once each (the gates, the states)
    operands = sum(t.nbytes for t in (*op.inputs, *op.outputs, *op.params))
    assert op.block_bytes(whole) > operands
    # each of its kernels is a launch, in the analytic model's time
    model = AnalyticCostModel()
    device = load_named_cluster("p100-4x4").devices[0]
    once = AnalyticCostModel(launch_overhead_s=0.0).op_cost(op, op.space_shape, device)
    assert model.op_cost(op, op.space_shape, device).forward_s == pytest.approx(
        once.forward_s + op.attrs["kernels"] * model.launch_overhead_s)
    assert op.attrs["kernels"] > 1


def test_an_opaque_model_searches(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", str(NET), "--opaque", "--cluster", "p100-4x4",
                 "--budget", "40"]) == 0
    assert "best" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
@pytest.mark.parametrize("model", [NET, LSTM, pytest.param(LLAMA, marks=pytest.mark.vision)],
                         ids=["grouped_cumsum", "lstm", "llama"])
def test_an_opaque_op_split_by_samples_trains_on_two_ranks_as_one_process(tmp_path, model):
    """``--check`` runs in float64 (the LSTM's first state too, Llama's rotary tables)."""
    if model == LLAMA:
        pytest.importorskip("transformers")
    log = tmp_path / "opaque.ffrun"
    proc = subprocess.run(
        [sys.executable, "-m", "flextui", "launch", "--model", str(model), "--opaque",
         "--strategy", "data-parallel", "--nproc-per-node", "2", "--check", "--run-log",
         str(log)], cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    assert "check passed: 2 ranks equal one process" in proc.stdout
    run = read_run_log(log)
    pids = [r.pid for r in run.records if isinstance(r, Start)]
    assert len(pids) == 2 and wait_gone(pids) == []
