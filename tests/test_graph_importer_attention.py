"""Transformers through the importer: a GPT-2-style decoder in plain PyTorch
(``torch_models/gpt2_decoder.py``: scaled_dot_product_attention between head-splitting
views and transposes, torch.arange positions, tanh GELU, a token-level loss) and
``nn.MultiheadAttention``, recognised by its module and mapped whole. Each keeps the
module's parameters, computes its loss, searches and simulates, and a 2-rank launch of
a split strategy trains exactly as the module's own optimizer step does."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from flextui.cli import main
from flextui.errors import GraphError
from flextui.graph import full_region
from flextui.graph.importer import import_module
from flextui.graph.library import load_model
from flextui.runtime.metrics import Check, Start
from flextui.runtime.reference import forward_whole, train_whole
from flextui.runtime.runlog import read_run_log
from flextui.runtime.values import StartingParameters
from helpers import HANG_S
from module_loop import module_training, step_data
from processes import wait_gone

GPT_FILE = Path(__file__).with_name("torch_models") / "gpt2_decoder.py"


def gpt_source():
    spec = importlib.util.spec_from_file_location("gpt2_decoder_for_tests", GPT_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).abs().max() / b.abs().max()).item())


def test_the_gpt_decoder_maps_layer_by_layer_with_the_modules_parameters():
    source = gpt_source()
    module = source.model()
    graph = load_model(str(GPT_FILE), batch_size=4)
    types = [op.type for op in graph.ops]
    layers = source.LAYERS
    assert types.count("multihead_attention") == layers
    assert types.count("linear") == sum(isinstance(m, nn.Linear) for m in module.modules())
    assert types.count("layernorm") == sum(isinstance(m, nn.LayerNorm) for m in module.modules())
    assert types.count("embedding") == 2 and types.count("softmax_ce") == 1
    # idx, targets and the positions torch.arange makes; 11 ops a block
    assert len(graph.ops) == 3 + 3 + 11 * layers + 3
    assert graph.param_count == sum(p.numel() for p in module.parameters())
    attention = next(op for op in graph.ops if op.type == "multihead_attention")
    assert attention.attrs == {"heads": source.HEADS, "causal": True}
    assert attention.name == "h.0.attn.scaled_dot_product_attention"
    gelu = next(op for op in graph.ops if op.name == "h.0.mlp.1")
    assert gelu.attrs == {"fn": "gelu", "approximate": "tanh"}
    positions = next(op for op in graph.ops if op.name == "positions")
    assert positions.attrs["fill"] == "positions"
    # the graph keeps the file it was built from here, never in its data
    assert graph.source.name == str(GPT_FILE.resolve()) and graph.source.kind == "file"
    assert graph.source.code == GPT_FILE.read_bytes()
    assert "module" not in graph.meta and str(GPT_FILE) not in str(graph.to_dict())


def test_the_gpt_decoder_computes_the_modules_loss_from_the_modules_weights():
    graph = load_model(str(GPT_FILE), batch_size=4)
    data = step_data(graph, seed=3, step=0)
    assert data["positions"].tolist() == [list(range(16))] * 4
    start = StartingParameters(graph, seed=3)
    params = {name: start.block(name, full_region(p.shape), torch.float64)
              for name, p in graph.parameters.items()}
    found = forward_whole(graph, params, lambda op: data[op.name], seed=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        module = gpt_source().model().double()
    expected = module(data["idx"], data["targets"])
    assert float(found.detach()) == pytest.approx(float(expected.detach()), rel=1e-9)


@pytest.mark.parametrize("factory", ["model", "tied"])
def test_one_process_trains_as_the_modules_own_optimizer_does(factory, monkeypatch):
    """Also with the head tied to the token embedding: one graph parameter that both
    ops read, whose gradient is the sum of both, as in the module."""
    monkeypatch.syspath_prepend(str(GPT_FILE.parent))
    graph = load_model(f"gpt2_decoder:{factory}", batch_size=2)
    assert graph.param_count == sum(p.numel() for p in getattr(gpt_source(), factory)()
                                    .parameters())
    reference = train_whole(graph, 3, seed=1)
    losses, params = module_training(graph, seed=1, steps=3)
    assert reference.losses == pytest.approx(losses, rel=1e-9)
    names = graph.meta["module_params"]
    assert max(relative(reference.params[n], params[names[n]]) for n in names) < 1e-9


def test_the_gpt_decoder_searches_and_simulates(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--model", str(GPT_FILE), "--cluster", "p100-4x4",
                 "--strategy", "expert"]) == 0
    assert main(["search", "--model", str(GPT_FILE), "--cluster", "p100-4x4",
                 "--budget", "40"]) == 0
    out = capsys.readouterr().out
    assert "gpt2_decoder" in out and "best" in out


def test_multihead_attention_maps_as_one_projection_the_attention_and_its_output():
    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = nn.MultiheadAttention(16, 4, batch_first=True)
            self.head = nn.Linear(16 * 8, 10)

        def forward(self, x):
            y, _ = self.mha(x, x, x, need_weights=False)
            return self.head((y * 0.5 + x / 4).flatten(1))

    torch.manual_seed(0)
    module = Encoder()
    x = torch.randn(4, 8, 16)
    graph = import_module(module, (x,), "encoder")
    assert [op.name for op in graph.ops if op.name.startswith("mha")] == \
        ["mha.in_proj", "mha.split", "mha.attention", "mha.out_proj"]
    names = graph.meta["module_params"]
    assert names["mha.in_proj.weight"] == "mha.in_proj_weight"
    assert set(names.values()) == {n for n, _ in module.named_parameters()}
    module = module.double()
    own = dict(module.named_parameters())
    params = {n: own[names[n]].detach() for n in graph.parameters}
    labels = torch.randint(0, 10, (4,))
    data = {"x": x.double(), "labels": labels}
    found = forward_whole(graph, params, lambda op: data[op.name], seed=0)
    expected = nn.functional.cross_entropy(module(x.double()), labels)
    assert float(found.detach()) == pytest.approx(float(expected.detach()), rel=1e-9)


def test_multihead_attention_with_its_weights_used_says_so():
    class Weights(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x):
            y, w = self.mha(x, x, x)
            return (y.flatten(1) + w.flatten(1).sum(1, keepdim=True))

    with pytest.raises(GraphError) as caught:
        import_module(Weights(), (torch.randn(2, 4, 8),), "weights")
    assert "torch.nn.MultiheadAttention x1 in mha" in str(caught.value)
    assert "need_weights=False" in str(caught.value)


def test_heads_read_other_than_by_attention_are_reported():
    class Peek(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x):
            heads = self.proj(x).view(2, 4, 2, 4).transpose(1, 2)
            return torch.relu(heads).flatten(1)

    with pytest.raises(GraphError) as caught:
        import_module(Peek(), (torch.randn(2, 4, 8),), "peek")
    assert "aten.relu.default x1" in str(caught.value)
    assert "split into attention heads" in str(caught.value)


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_a_two_rank_launch_of_a_split_strategy_trains_as_the_modules_own_step(tmp_path):
    """flextui launch --check on 2 CPU ranks under a strategy that splits ops: the ranks'
    loss at every step equals the module's own training (model() under the run's seed,
    torch.optim.SGD) on the same data, and the ranks equal one process."""
    log = tmp_path / "gpt.ffrun"
    proc = subprocess.run(
        [sys.executable, "-m", "flextui", "launch", "--model", str(GPT_FILE), "--strategy",
         "random", "--seed", "2", "--nproc-per-node", "2", "--check", "--run-log", str(log)],
        cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    assert "check passed: 2 ranks equal one process" in proc.stdout
    run = read_run_log(log)
    graph, strategy = run.header.spec.graph, run.header.spec.strategy
    assert any(max(strategy[op.name].degrees) > 1 for op in graph.ops)  # something is split
    checks = [r for r in run.records if isinstance(r, Check)]
    losses, _ = module_training(graph, seed=2, steps=len(checks[0].losses),
                                source=str(GPT_FILE))
    assert list(checks[0].losses) == pytest.approx(losses, rel=1e-9)
    pids = [r.pid for r in run.records if isinstance(r, Start)]
    assert len(pids) == 2 and wait_gone(pids) == []
