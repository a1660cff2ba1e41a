"""Dense prediction: a per-pixel cross-entropy in torch's convention (logits [B, C, H, W],
labels [B, H, W]) imports as a softmax_ce op over the class dim 1, whether the module
computes it or returns the logits; a small U-Net (tests/torch_models/unet.py) with
--opaque computes its module's loss, and launches on 2 CPU ranks as one process runs it,
its logits per pixel or one pixel a row."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from flextui.cli import main
from flextui.graph.importer.convert import import_module
from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.runtime.metrics import Start
from flextui.runtime.plan import compile_plan
from flextui.runtime.reference import forward_whole
from flextui.runtime.runlog import read_run_log
from flextui.strategy.builtins import builtin_strategy
from helpers import HANG_S
from processes import wait_gone

MODELS = Path(__file__).with_name("torch_models")
UNET = MODELS / "unet.py"
_spec = importlib.util.spec_from_file_location("unet", UNET)
unet = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(unet)


def graph_loss(graph, module, data):
    """The graph's loss in float64 from the module's own parameters (by the names the
    importer recorded) on ``data`` (by input op name)."""
    weights = dict(module.named_parameters())
    params = {name: weights[graph.meta["module_params"][name]].detach().double()
              for name in graph.parameters}
    return float(forward_whole(graph, params, lambda op: data[op.name], seed=0))


def test_a_per_pixel_cross_entropy_in_the_module_is_mapped_over_the_class_dim():
    torch.manual_seed(0)
    module = unet.with_loss()
    x, target = torch.randn(2, 3, 8, 8), torch.randint(0, unet.CLASSES, (2, 8, 8))
    graph = import_module(module, (x, target), "unet", opaque=True)
    (loss,) = [op for op in graph.ops if op.type == "softmax_ce"]
    assert loss.attrs["class_dim"] == 1 and loss.inputs[1].shape == (2, 8, 8)
    expected = float(module.double()(x.double(), target).detach())
    assert graph_loss(graph, module, {"x": x.double(), "target": target}) == \
        pytest.approx(expected, rel=1e-9)


def test_a_module_returning_per_pixel_logits_gets_a_per_pixel_loss():
    graph = load_model(str(UNET), opaque=True)
    labels = next(op for op in graph.ops if op.name == "labels")
    assert labels.outputs[0].shape == (4, 8, 8)
    assert [op.name for op in graph.ops if op.type == "opaque"] == ["up2", "up1"]
    torch.manual_seed(0)
    module = unet.model()
    x, target = torch.randn(4, 3, 8, 8), torch.randint(0, unet.CLASSES, (4, 8, 8))
    expected = float(F.cross_entropy(module.double()(x.double()), target).detach())
    assert graph_loss(graph, module, {"x": x.double(), "labels": target}) == \
        pytest.approx(expected, rel=1e-9)


def test_logits_one_pixel_a_row_from_an_opaque_op_plan_on_two_ranks(monkeypatch):
    """The reshape to [B*H*W, C] runs in an opaque op that is not batch-wise: its output's
    rows are pixels, not samples, so every block of it is the whole tensor."""
    monkeypatch.syspath_prepend(str(MODELS))
    graph = load_model("unet:pixels", opaque=True)
    cluster = load_named_cluster("local-cpu-2")
    for name in ("data-parallel", "random"):
        compile_plan(graph, builtin_strategy(name, graph, cluster), 2)


def test_a_u_net_searches_and_the_hint_to_simulate_it_keeps_opaque(tmp_path, capsys,
                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", str(UNET), "--opaque", "--cluster", "local-cpu-2",
                 "--budget", "40"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--opaque -c local-cpu-2 --strategy" in out


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
@pytest.mark.parametrize("model, strategy", [(str(UNET), "data-parallel"),
                                             ("unet:pixels", "random")])
def test_a_u_net_launches_on_two_ranks_as_one_process(tmp_path, model, strategy):
    log = tmp_path / "unet.ffrun"
    proc = subprocess.run(
        [sys.executable, "-m", "flextui", "launch", "--model", model, "--opaque",
         "--strategy", strategy, "--nproc-per-node", "2", "--check", "--run-log", str(log)],
        cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(MODELS)})
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    assert "check passed: 2 ranks equal one process" in proc.stdout
    pids = [r.pid for r in read_run_log(log).records if isinstance(r, Start)]
    assert len(pids) == 2 and wait_gone(pids) == []
