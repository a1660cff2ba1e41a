"""Refusals that help: one run names every kind of op the importer cannot map (the walk
goes on past an op it cannot map, a tensor of its shape standing in for its result), a
refusal says whether ``--opaque`` would import the model, and a Hugging Face model with
its cache on is told so in plain words."""

from pathlib import Path

import pytest
import torch
from torch import nn

from flextui.cli import main
from flextui.graph.importer import UnsupportedOps, aten, import_module

MODELS = Path(__file__).with_name("torch_models")


class CumsumThenFlatten(nn.Module):
    """An op with no mapping (cumsum), then a mapped op in a variant that cannot be
    partitioned (a transpose of the batch dim, and back)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)
        self.head = nn.Linear(3 * 8, 10)

    def forward(self, x):
        y = torch.cumsum(x, dim=-1).transpose(0, 1).transpose(0, 1).flatten(2)
        return self.head(self.fc(y).flatten(1))


def refused_kinds() -> set[str]:
    with pytest.raises(UnsupportedOps) as caught:
        import_module(CumsumThenFlatten(), (torch.randn(2, 3, 4, 4),), "net")
    return {u.target for u in caught.value.found}


def test_one_run_names_every_kind_a_fix_would_leave(monkeypatch):
    """Each fix leaves only kinds the first run named (the transpose after the cumsum
    was named only once the cumsum mapped)."""
    first = refused_kinds()
    assert first == {"aten.cumsum.default", "aten.transpose.int"}
    monkeypatch.setitem(aten.HANDLERS, "aten.cumsum.default", aten.alias)  # "fixed"
    assert refused_kinds() <= first


def test_a_kind_refused_only_after_an_unmapped_op_says_it_may_go_with_it():
    with pytest.raises(UnsupportedOps) as caught:
        import_module(CumsumThenFlatten(), (torch.randn(2, 3, 4, 4),), "net")
    lines = str(caught.value).splitlines()
    transpose = next(line for line in lines if "aten.transpose.int" in line)
    cumsum = next(line for line in lines if "aten.cumsum.default" in line)
    assert "after an op that cannot be mapped: may go with it" in transpose
    assert "after an op" not in cumsum


def test_a_refusal_that_opaque_fixes_says_so(capsys):
    net = str(MODELS / "grouped_cumsum.py")
    assert main(["show", "--model", net]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--opaque imports it: these ops become 1 opaque op that runs the module's own " \
           "code" in err
    assert main(["show", "--model", net, "--opaque"]) == 0


def test_a_refusal_that_opaque_does_not_fix_says_that_too(monkeypatch):
    from flextui.graph.importer import opaque
    from flextui.graph.importer.context import Unmappable

    def refuse(*args):
        raise Unmappable("a region this test refuses")
    monkeypatch.setattr(opaque, "close", refuse)
    with pytest.raises(UnsupportedOps) as caught:
        import_module(CumsumThenFlatten(), (torch.randn(2, 3, 4, 4),), "net")
    assert "--opaque does not import it either: an opaque region: a region this test " \
           "refuses" in str(caught.value)


def test_a_tensor_the_forward_makes_is_a_constant_not_an_input():
    """torch.tensor([]) returned beside the logits (as a cache once was) is a constant:
    it was made an input op, refused as "output shape (0,) is empty"."""
    class WithConstant(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x), torch.tensor([])

    graph = import_module(WithConstant(), (torch.randn(2, 4),), "constant")
    assert [op.name for op in graph.ops if op.type == "input"] == ["x", "labels"]


def test_a_hugging_face_model_with_its_cache_on_is_told_so_in_plain_words(tmp_path, capsys):
    pytest.importorskip("transformers")
    model = tmp_path / "gpt2_cached.py"
    model.write_text(
        "import torch\n"
        "from transformers import GPT2Config, GPT2LMHeadModel\n"
        "BATCH_SIZE = 2\n"
        "def model():\n"
        "    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2,\n"
        "                                      vocab_size=100, n_positions=16))\n"
        "def example_inputs(batch_size):\n"
        "    return (torch.randint(0, 100, (batch_size, 8)),)\n")
    assert main(["show", "--model", str(model)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "is a Hugging Face transformers model with use_cache on" in err
    assert "model.config.use_cache = False" in err and "Traceback" not in err
