"""``--opaque``: what the importer cannot map op by op (here a grouped convolution and
cumulative sums) becomes opaque ops that run the module's own nodes, split by samples
only when the region is batch-wise, so the model still shows, searches, computes the
module's loss and trains on ranks as one process does."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flextui.cli import main
from flextui.graph import full_region
from flextui.graph.dims import DimKind
from flextui.graph.library import load_model, pytorch_model
from flextui.runtime.metrics import Start
from flextui.runtime.reference import forward_whole
from flextui.runtime.runlog import read_run_log
from flextui.runtime.values import StartingParameters
from helpers import HANG_S
from processes import wait_gone

MODELS = Path(__file__).with_name("torch_models")
NET = MODELS / "grouped_cumsum.py"


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


def test_the_opaque_graph_computes_the_modules_loss():
    graph = load_model(str(NET), opaque=True)
    start = StartingParameters(graph, seed=5)
    params = {name: start.block(name, full_region(p.shape), torch.float64)
              for name, p in graph.parameters.items()}
    x = torch.randn(4, 3, 8, 8, dtype=torch.float64)
    labels = torch.randint(0, 10, (4,))
    data = {"x": x, "labels": labels}
    found = forward_whole(graph, params, lambda op: data[op.name], seed=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        module = pytorch_model(str(NET)).make().double()
    expected = torch.nn.functional.cross_entropy(module(x), labels)
    assert float(found.detach()) == pytest.approx(float(expected.detach()), rel=1e-9)


def test_an_opaque_model_searches(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", str(NET), "--opaque", "--cluster", "p100-4x4",
                 "--budget", "40"]) == 0
    assert "best" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_an_opaque_op_split_by_samples_trains_on_two_ranks_as_one_process(tmp_path):
    log = tmp_path / "opaque.ffrun"
    proc = subprocess.run(
        [sys.executable, "-m", "flextui", "launch", "--model", str(NET), "--opaque",
         "--strategy", "data-parallel", "--nproc-per-node", "2", "--check", "--run-log",
         str(log)], cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    assert "check passed: 2 ranks equal one process" in proc.stdout
    run = read_run_log(log)
    pids = [r.pid for r in run.records if isinstance(r, Start)]
    assert len(pids) == 2 and wait_gone(pids) == []
