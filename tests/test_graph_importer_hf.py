"""Hugging Face models by name: ``hf:gpt2``, ``hf:llama``, ``hf:bert``, ``hf:vit``,
``hf:t5`` (and ``hf:CONFIG.json``) are built from transformers' configs with random weights, import
without --opaque with the module's own parameter counts, train exactly as a plain
PyTorch loop trains the module on the same batches (float64), simulate, search and
pass ``launch --check`` on 2 CPU ranks; without transformers, ``hf:...`` is one message."""

import json
import os
import subprocess
import sys

import pytest
import torch

from flextui.cli import main
from flextui.graph.library import load_model, pytorch_model
from flextui.runtime.reference import train_whole
from helpers import HANG_S
from module_loop import module_training

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.vision  # run again beside a second torch (.ci/run)

NAMES = ["gpt2", "llama", "bert", "vit", "t5"]
SMALL = {"batch_size": 4}


def small(name):
    sizes = {"vit": {}, "t5": {"seq_len": 8, "target_len": 6}}
    return {**SMALL, **sizes.get(name, {"seq_len": 8})}


def module_of(name, **options):
    return pytorch_model(f"hf:{name}", {**small(name), **options}).module()


@pytest.mark.parametrize("name", NAMES)
def test_each_trains_as_a_plain_pytorch_loop_trains_the_module(name):
    graph = load_model(f"hf:{name}", **small(name))
    assert not any(op.type == "opaque" for op in graph.ops)
    module = module_of(name)
    assert graph.param_count == sum(p.numel() for p in module.parameters())
    run = train_whole(graph, 3, seed=1)
    losses, params = module_training(graph, seed=1, steps=3)
    assert run.losses == pytest.approx(losses, rel=1e-9, abs=0)
    names = graph.meta["module_params"]
    assert set(names.values()) <= set(params)
    for n in names:
        torch.testing.assert_close(run.params[n], params[names[n]], rtol=1e-9, atol=1e-12)


def test_the_ops_are_the_models_own():
    gpt = load_model("hf:gpt2", **small("gpt2"))
    attention = [op for op in gpt.ops if op.type == "multihead_attention"]
    assert [op.attrs["causal"] for op in attention] == [True, True]     # HF's mask
    c_attn = next(op for op in gpt.ops if op.name == "transformer.h.0.attn.c_attn.addmm")
    assert c_attn.attrs["transposed"]                                  # GPT-2's Conv1D
    wte, head = (next(op for op in gpt.ops if op.name == n) for n in ("transformer.wte",
                                                                      "lm_head"))
    assert wte.params == head.params                                   # tied, as GPT-2's
    assert [op.name for op in gpt.ops if op.type == "input"] == \
        ["input_ids", "labels", "positions"]
    llama = load_model("hf:llama", **small("llama"))
    kinds = {op.type for op in llama.ops}
    assert {"rotary", "channel_mul", "mean"} <= kinds
    assert [op.attrs["causal"] for op in llama.ops if op.type == "multihead_attention"] == \
        [True, True]
    silu = [op for op in llama.ops if op.type == "unary" and op.attrs["fn"] == "silu"]
    assert len(silu) == 2
    t5 = load_model("hf:t5", **small("t5"))
    attention = [op for op in t5.ops if op.type == "multihead_attention"]
    # 2 encoder layers, then 2 decoder layers of causal self- and cross-attention
    assert [op.attrs["causal"] for op in attention] == [False, False, True, False, True, False]
    assert {op.attrs.get("scale") for op in attention} == {1.0}           # T5's unscaled
    encoder, _, decoder, cross, _, _ = attention
    assert encoder.params == attention[1].params   # layer 0's bias table, shared
    assert len(encoder.attrs["buckets"]) == 15 and len(decoder.attrs["buckets"]) == 11
    assert "buckets" not in cross.attrs
    bert = load_model("hf:bert", **small("bert"))
    assert not any(op.attrs.get("causal") for op in bert.ops)
    assert {op.attrs.get("fill") for op in bert.ops if op.type == "input"} >= \
        {"positions", "zeros"}


def test_options_size_the_config():
    graph = load_model("hf:gpt2", n_layer=3, n_embd=32, **small("gpt2"))
    module = module_of("gpt2", n_layer=3, n_embd=32)
    assert module.config.n_layer == 3 and module.config.n_embd == 32
    assert graph.param_count == sum(p.numel() for p in module.parameters())
    assert sum(op.type == "multihead_attention" for op in graph.ops) == 3


def test_a_config_file_builds_its_model(tmp_path):
    config = tmp_path / "tiny-llama.json"
    config.write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32,
        "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 2, "vocab_size": 64, "max_position_embeddings": 16,
        "bos_token_id": 0, "eos_token_id": 0}))
    graph = load_model(f"hf:{config}", batch_size=2, seq_len=8)
    assert graph.source.text == f"hf:{config}" and graph.source.code == config.read_bytes()
    module = pytorch_model(graph.source, graph.meta["options"]).module()
    assert type(module).__name__ == "LlamaForCausalLM"
    assert graph.param_count == sum(p.numel() for p in module.parameters()) == 2 * 64 * 32 + \
        4 * 32 * 32 + 3 * 32 * 64 + 3 * 32


def test_they_are_listed_and_searched_and_simulated(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["models", "--json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert {"hf:gpt2", "hf:llama", "hf:bert", "hf:t5", "hf:vit"} <= set(listed)
    assert listed["hf:gpt2"]["options"]["n_layer"] == 2
    for name in ("gpt2", "llama"):
        assert main(["simulate", "--model", f"hf:{name}", "--cluster", "p100-4x4",
                     "--strategy", "expert", "-o", "n_layer=1" if name == "gpt2"
                     else "num_hidden_layers=1"]) == 0
    assert main(["search", "--model", "hf:vit", "--cluster", "p100-4x4", "--budget", "30"]) == 0
    assert "best" in capsys.readouterr().out


def test_without_transformers_it_says_to_install_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)   # import transformers fails
    assert main(["show", "--model", "hf:gpt2"]) == 2
    err = capsys.readouterr().err
    assert "pip install transformers" in err and "Traceback" not in err
    assert err.count("\n") == 1


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
@pytest.mark.parametrize("name", NAMES)
def test_a_two_rank_launch_check_passes(name, tmp_path):
    option = {"vit": "image_size=16", "t5": "num_decoder_layers=1"}.get(name, "seq_len=8")
    proc = subprocess.run(
        [sys.executable, "-m", "flextui", "launch", "--model", f"hf:{name}", "-o", option,
         "-b", "4", "--strategy", "random", "--seed", "2", "--nproc-per-node", "2",
         "--check"], cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    assert "check passed: 2 ranks equal one process" in proc.stdout


def test_a_models_key_value_cache_is_left_out(tmp_path):
    """A user's own file with a transformers model left at use_cache=True: the cache
    starts empty (a constant joined to each layer's keys and values) and is not read."""
    path = tmp_path / "cached_gpt.py"
    path.write_text(
        "import torch, transformers\n"
        "class LM(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2,\n"
        "            vocab_size=40, n_positions=16, bos_token_id=0, eos_token_id=0,\n"
        "            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)\n"
        "        assert config.use_cache\n"
        "        self.gpt = transformers.GPT2LMHeadModel(config)\n"
        "    def forward(self, ids, labels):\n"
        "        return self.gpt(input_ids=ids, labels=labels).loss\n"
        "def model():\n"
        "    return LM()\n"
        "def example_inputs(batch):\n"
        "    return (torch.randint(0, 40, (batch, 8)), torch.randint(0, 40, (batch, 8)))\n")
    graph = load_model(str(path), batch_size=2)
    assert sum(op.type == "multihead_attention" for op in graph.ops) == 1
    module = pytorch_model(graph.source).module()
    assert graph.param_count == sum(p.numel() for p in module.parameters())
    # the module as written computes its loss in float32 even in float64 (transformers'
    # logits.float()), so it agrees to float32's rounding; hf:gpt2 keeps float64
    run = train_whole(graph, 2, seed=3)
    assert run.losses == pytest.approx(module_training(graph, seed=3, steps=2)[0], rel=1e-6)
