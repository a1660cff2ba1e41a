"""Attention as people write it, judged by the user's own module: a causal
nn.TransformerEncoder (a mask buffer and ``is_causal``), a causal language model whose
masks are buffers (nn.MultiheadAttention's ``attn_mask``, a bool ``tril`` slice given to
scaled_dot_product_attention) and an encoder-decoder with cross-attention and a
``torch.triu`` mask each train exactly as a plain PyTorch loop trains the module on the
same batches (float64); a mask flextui cannot map is refused, never dropped."""

from pathlib import Path

import pytest
import torch
from torch import nn

from flextui.errors import GraphError
from flextui.graph.importer import import_module
from flextui.graph.library import load_model
from flextui.runtime.reference import forward_whole, train_whole
from module_loop import module_training

MODELS = Path(__file__).with_name("torch_models")


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).abs().max() / b.abs().max()).item())


@pytest.mark.parametrize("name,causal", [("causal_encoder", [True] * 2),
                                         ("causal_lm", [True] * 2),
                                         ("seq2seq", [False, True, False, True, False])])
def test_masked_attention_trains_as_the_modules_own_loop(name, causal):
    graph = load_model(str(MODELS / f"{name}.py"), batch_size=4)
    assert [op.attrs["causal"] for op in graph.ops
            if op.type == "multihead_attention"] == causal
    run = train_whole(graph, 3, seed=1)
    losses, params = module_training(graph, seed=1, steps=3)
    assert run.losses == pytest.approx(losses, rel=1e-9, abs=0)
    names = graph.meta["module_params"]
    assert set(names.values()) == set(params)
    assert max(relative(run.params[n], params[names[n]]) for n in names) < 1e-9


def test_cross_attention_projects_the_query_and_the_memory_with_one_packed_weight():
    graph = load_model(str(MODELS / "seq2seq.py"), batch_size=4)
    cross = [op for op in graph.ops if op.name.startswith("decoder.layers.0.multihead_attn")]
    assert [op.name.rpartition(".")[2] for op in cross] == \
        ["q_proj", "kv_proj", "split", "attention", "out_proj"]
    q_proj, kv_proj, _, attention, _ = cross
    assert q_proj.attrs["rows"] == [0, 48] and kv_proj.attrs["rows"] == [16, 48]
    assert q_proj.params[0] is kv_proj.params[0]            # one weight, as the module's
    assert attention.inputs[0].shape == (4, 6, 16) and attention.inputs[1].shape == (4, 10, 16)


class Masked(nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.register_buffer("mask", mask)

    def forward(self, x):
        y, _ = self.attn(x, x, x, attn_mask=self.mask, need_weights=False)
        return y.flatten(1)


@pytest.mark.parametrize("mask,why", [
    (torch.triu(torch.ones(4, 4, dtype=torch.bool), 2), "neither causal nor all-seeing"),
    (torch.randn(4, 4), "values other than 0 and -inf")])
def test_a_mask_that_is_not_causal_is_refused_not_dropped(mask, why):
    with pytest.raises(GraphError) as caught:
        import_module(Masked(mask), (torch.randn(2, 4, 8),), "masked")
    assert "torch.nn.MultiheadAttention x1 in attn" in str(caught.value)
    assert why in str(caught.value)


class Reshapes(nn.Module):
    """A reshape that keeps the batch ([8, 10] -> [-1, 10]), flatten(2) and a transpose
    of non-batch dims, as a ViT's patch embedding does."""

    def __init__(self):
        super().__init__()
        self.patches = nn.Conv2d(3, 10, 2, stride=2)
        self.head = nn.Linear(10, 5)

    def forward(self, x):
        tokens = self.patches(x).flatten(2).transpose(1, 2)       # [B, 4, 10]
        first = tokens[:, 0].reshape(-1, 10)                      # [B, 10]
        return self.head(first)


def test_reshapes_that_keep_the_batch_map():
    torch.manual_seed(0)
    module = Reshapes()
    x = torch.randn(8, 3, 4, 4)
    graph = import_module(module, (x,), "reshapes")
    assert {"conv2d", "reshape", "transpose", "slice", "linear"} <= {op.type for op in graph.ops}
    module = module.double()
    own = dict(module.named_parameters())
    params = {n: own[graph.meta["module_params"][n]].detach() for n in graph.parameters}
    labels = torch.randint(0, 5, (8,))
    data = {"x": x.double(), "labels": labels}
    found = forward_whole(graph, params, lambda op: data[op.name], seed=0)
    expected = nn.functional.cross_entropy(module(x.double()), labels)
    assert float(found.detach()) == pytest.approx(float(expected.detach()), rel=1e-12)
