"""The user's module is the referee. At import, the module and its graph run once in
float64 on the example inputs and must agree on the loss and every gradient, or the
import is refused naming the first op that differs; ``launch --check`` compares the
ranks with the module trained by plain PyTorch, so an import that changed the model's
meaning fails it. The conversions broken here are injected by the tests, so the
wrongness does not depend on what the importer gets wrong today."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from flextui.cli import main
from flextui.errors import GraphError
from flextui.graph.importer import aten, convert, verify, views
from flextui.graph.library import load_model, pytorch_model
from flextui.machine import load_named_cluster
from flextui.runtime.metrics import Check, Start
from flextui.runtime.referee import train_module
from flextui.runtime.reference import train_whole
from flextui.runtime.runlog import read_run_log
from flextui.strategy.builtins import data_parallel
from helpers import HANG_S
from processes import wait_gone

MODELS = Path(__file__).with_name("torch_models")
GPT = MODELS / "gpt2_decoder.py"
NET = MODELS / "dropout_norm.py"


def non_causal(ctx, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
    """scaled_dot_product_attention mapped with its causal mask dropped."""
    return views.attention(ctx, q, k, v, attn_mask, dropout_p, False, **kwargs)


#: conversions broken on purpose: what is mapped wrongly, in which model, and the op
#: the refusal must name first
BROKEN = {
    "causal mask dropped": ("aten.scaled_dot_product_attention.default", non_causal, GPT,
                            "'h.0.attn.scaled_dot_product_attention' (multihead_attention)"),
    "tanh mapped as sigmoid": ("aten.tanh.default", aten.unary("sigmoid"), NET, "'6' (unary)"),
}


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).abs().max() / b.abs().max()).item())


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_an_import_that_changes_the_loss_is_refused_naming_the_first_op(case, capsys,
                                                                        monkeypatch):
    target, handler, path, first = BROKEN[case]
    monkeypatch.setitem(aten.HANDLERS, target, handler)
    assert main(["show", "--model", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "the import changes what the model computes" in err, err
    assert f"the first op that differs is {first}" in err and "Traceback" not in err


def test_a_correct_import_is_compared_with_its_module():
    model = pytorch_model(str(NET))
    graph, verdict = convert.import_checked(model.module(), model.example(4), "net")
    assert verdict.checked and graph.batch_size == 4


def test_the_referee_trains_the_module_not_the_graph(monkeypatch):
    """Batch norm per sample block of a data-parallel strategy, dropout's masks: the
    module trained by plain PyTorch equals the graph's one-process training; with a
    conversion broken (and the import's check off) the graph's training moves away from
    the module's, and the referee stays the module's."""
    graph = load_model(str(NET))
    strategy = data_parallel(graph, load_named_cluster("local-cpu-2"))
    module = train_module(graph, 3, seed=1, strategy=strategy)
    whole = train_whole(graph, 3, seed=1, strategy=strategy)
    assert module.losses == pytest.approx(whole.losses, rel=1e-12)
    assert max(relative(module.params[n], whole.params[n]) for n in whole.params) < 1e-12
    assert train_module(graph, 3, seed=1).losses != pytest.approx(module.losses, rel=1e-6)

    monkeypatch.setitem(aten.HANDLERS, "aten.tanh.default", aten.unary("sigmoid"))
    monkeypatch.setattr(convert, "check_import", lambda *args: verify.Verdict(True))
    broken = load_model(str(NET))
    assert train_module(broken, 3, seed=1, strategy=strategy).losses == module.losses
    assert train_whole(broken, 3, seed=1, strategy=strategy).losses != \
        pytest.approx(module.losses, rel=1e-3)


def test_a_model_too_large_to_check_is_checked_at_a_smaller_batch(monkeypatch):
    graph = load_model(str(NET))  # batch 4
    per_sample = verify.Estimate.of(graph).flops_per_sample
    monkeypatch.setattr(verify, "CHECK_FLOPS", per_sample * 2.5)
    checked = []
    real = convert.check_import
    monkeypatch.setattr(convert, "check_import",
                        lambda graph, *args: checked.append(graph.batch_size) or
                        real(graph, *args))
    monkeypatch.setitem(aten.HANDLERS, "aten.tanh.default", aten.unary("sigmoid"))
    with pytest.raises(GraphError, match="the import changes what the model computes"):
        load_model(str(NET))
    assert checked == [4, 2]


def test_a_model_too_large_to_check_at_any_batch_says_it_skipped_the_check(monkeypatch,
                                                                            caplog):
    monkeypatch.setattr(verify, "CHECK_FLOPS", 1.0)
    graph = load_model(str(NET))
    assert graph.batch_size == 4
    said = " ".join(caplog.text.split())
    assert "did not compare the import with the module in float64" in said
    assert "GFLOPs at batch 4" in said and "flextui launch --check" in said


LAUNCH = """
import sys
from flextui.cli import main
from flextui.graph.importer import aten, convert, verify
{broken}
sys.exit(main(["launch", "--model", {model!r}, "--strategy", "data-parallel",
               "--nproc-per-node", "2", "--check", "--run-log", {log!r}]))
"""
BREAK_TANH = """
aten.HANDLERS["aten.tanh.default"] = aten.unary("sigmoid")
convert.check_import = lambda *args: verify.Verdict(True)  # the import's own check off
"""


def _launch_check(tmp_path, broken: str):
    log = tmp_path / "net.ffrun"
    code = textwrap.dedent(LAUNCH).format(broken=broken, model=str(NET), log=str(log))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=HANG_S, env={**os.environ, "OMP_NUM_THREADS": "1"})
    run = read_run_log(log)
    pids = [r.pid for r in run.records if isinstance(r, Start)]
    assert len(pids) == 2 and wait_gone(pids) == []
    return proc, [r for r in run.records if isinstance(r, Check)]


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_launch_check_of_dropout_and_batch_norm_equals_the_module(tmp_path):
    proc, checks = _launch_check(tmp_path, "")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    said = " ".join(proc.stdout.split())
    assert "check passed: 2 ranks equal one process of the module (plain PyTorch)" in said
    graph = load_model(str(NET), batch_size=2)  # the check's batch: the strategy's least
    strategy = data_parallel(graph, load_named_cluster("local-cpu-2"))
    expected = train_module(graph, len(checks[0].losses), seed=0, strategy=strategy)
    assert list(checks[0].reference_losses) == pytest.approx(expected.losses, rel=1e-12)


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_launch_check_fails_for_an_import_that_changes_the_model(tmp_path):
    """The ranks train the broken graph; the referee is the module, so they differ."""
    proc, checks = _launch_check(tmp_path, BREAK_TANH)
    said = " ".join(proc.stdout.split())
    assert proc.returncode == 1, proc.stderr[-3000:] + proc.stdout
    assert "check failed" in said and "away from one process of the module" in said
    assert all(c.loss_error > 1e-3 for c in checks)


def test_a_module_that_does_not_run_in_float64_is_imported_unchecked_saying_why():
    """A module that refuses float64 inputs cannot be compared, which is no reason to
    refuse it."""
    class Float32Only(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            if x.dtype != torch.float32:
                raise TypeError("float32 inputs only")
            return self.fc(x)

    graph, verdict = convert.import_checked(Float32Only(), (torch.randn(2, 4),), "fp32")
    assert not verdict.checked and [op.type for op in graph.ops][:2] == ["input", "linear"]
    assert "the module does not run in float64 as the graph does: TypeError: float32 " \
           "inputs only" in verdict.why
