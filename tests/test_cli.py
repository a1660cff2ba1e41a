"""The command line: each subcommand, its --json shape, and clear exit-2 errors."""

import json
import subprocess
import sys

import pytest

from flextui.cli import main
from helpers import HANG_S


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_models_lists_every_library_model(capsys):
    code, out, _ = run(capsys, "models", "--json")
    names = [m["name"] for m in json.loads(out)]
    assert code == 0 and {"alexnet", "inception_v3", "resnet101", "rnntc", "rnnlm", "nmt",
                          "lenet", "rnnlm2", "transformer", "dlrm", "mlp"} <= set(names)
    rnnlm = next(m for m in json.loads(out) if m["name"] == "rnnlm")
    assert rnnlm["ranges"]["layers"] == [1, 64]   # the range -o layers=N must be in


def test_clusters_and_detect(capsys):
    code, out, _ = run(capsys, "clusters", "--json")
    by_name = {c["name"]: c for c in json.loads(out)}
    assert code == 0 and by_name["p100-4x4"]["devices"] == 16 and by_name["k80-16x4"]["nodes"] == 16
    code, out, _ = run(capsys, "clusters", "--detect", "--json")
    assert code == 0 and json.loads(out)["cluster"]["devices"] >= 1


def test_show_model_json_shape(capsys):
    code, out, _ = run(capsys, "show", "--model", "alexnet", "--batch-size", "32", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["summary"]["batch_size"] == 32 and data["summary"]["parameters"] == 61_100_840
    conv = next(r for r in data["ops"] if r["type"] == "conv2d")
    assert [d["kind"] for d in conv["dims"]] == ["sample", "parameter", "attribute", "attribute"]
    assert conv["outputs"][0][0] == 32
    assert conv["params"] == [f"{conv['name']}.weight", f"{conv['name']}.bias"]


def test_show_model_table(capsys):
    code, out, _ = run(capsys, "show", "-m", "lenet", "-o", "num_classes=7", "--limit", "0")
    assert code == 0 and "lenet (cnn): 15 ops" in out
    fc3 = next(line for line in out.splitlines() if "fc3" in line)
    assert "S64 P7" in fc3 and "595" in fc3


def test_show_strategy_exports_and_reimports(capsys, tmp_path):
    path = tmp_path / "expert.json"
    code, _, _ = run(capsys, "show", "-m", "rnnlm2", "-c", "dgx-a100", "-s", "expert",
                     "--export", str(path))
    assert code == 0 and path.exists()
    code, out, _ = run(capsys, "show", "-m", "rnnlm2", "-c", "dgx-a100", "-s", str(path), "--json")
    data = json.loads(out)
    assert code == 0 and data["summary"]["valid"] and data["summary"]["name"] == "expert"
    assert data["summary"]["recomputed"] == 0


def test_show_strategy_lists_the_recomputed_ops(capsys, tmp_path):
    path = tmp_path / "s.json"
    run(capsys, "show", "-m", "lenet", "-c", "local-cpu-4", "-s", "data-parallel", "--export",
        str(path))
    data = json.loads(path.read_text())
    for name in ("conv1", "unary_1"):
        data["ops"][name]["recompute"] = True
    path.write_text(json.dumps(data))
    code, out, _ = run(capsys, "show", "-m", "lenet", "-c", "local-cpu-4", "-s", str(path),
                       "--limit", "0")
    assert code == 0 and "; 2 recomputed" in out
    assert "sample=4 recompute" in next(line for line in out.splitlines() if "│ conv1 " in line)
    assert "recompute" not in next(line for line in out.splitlines() if "│ conv2 " in line)
    code, out, _ = run(capsys, "show", "-m", "lenet", "-c", "local-cpu-4", "-s", str(path), "--json")
    rows = {r["op"]: r for r in json.loads(out)["ops"]}
    assert rows["unary_1"]["recompute"] and not rows["pool1"]["recompute"]


def test_show_strategy_names_its_micro_batches_as_simulate_does(capsys, tmp_path):
    path = tmp_path / "s.json"
    run(capsys, "show", "-m", "lenet", "-c", "local-cpu-4", "-s", "data-parallel", "--export",
        str(path))
    data = json.loads(path.read_text())
    data.update(microbatches=2, schedule="1f1b")
    path.write_text(json.dumps(data))
    code, out, _ = run(capsys, "show", "-m", "lenet", "-c", "local-cpu-4", "-s", str(path),
                       "--limit", "0")
    assert code == 0 and "; 2 micro-batches, 1f1b" in " ".join(out.split())
    code, out, _ = run(capsys, "simulate", "-m", "lenet", "-c", "local-cpu-4", "-s", str(path))
    assert code == 0 and "2 micro-batches, 1f1b" in " ".join(out.split())


def test_show_strategy_lists_the_sharded_parameters(capsys, tmp_path):
    path = tmp_path / "s.json"
    run(capsys, "show", "-m", "lenet", "-c", "local-cpu-4", "-s", "data-parallel", "--export",
        str(path))
    data = json.loads(path.read_text())
    data["params"] = {"fc1.weight": {"shard": 2}, "fc1.bias": {"shard": 1},
                      "conv1.bias": {"shard": 1}}
    path.write_text(json.dumps(data))
    code, out, _ = run(capsys, "show", "-m", "lenet", "-c", "local-cpu-4", "-s", str(path),
                       "--limit", "0")
    assert code == 0 and "; 3 parameters sharded (stage 2: 1, stage 1: 2)" in out
    assert "sample=4 shard 2" in next(line for line in out.splitlines() if "│ fc1 " in line)
    assert "shard" not in next(line for line in out.splitlines() if "│ fc2 " in line)
    code, out, _ = run(capsys, "show", "-m", "lenet", "-c", "local-cpu-4", "-s", str(path), "--json")
    shown = json.loads(out)
    rows = {r["op"]: r for r in shown["ops"]}
    assert rows["fc1"]["shards"] == {"fc1.weight": 2, "fc1.bias": 1} and rows["fc2"]["shards"] == {}
    assert shown["summary"]["sharded"] == {"2": 1, "1": 2}


@pytest.mark.parametrize("argv, message", [
    (["show", "--model", "nosuchnet"], "unknown model 'nosuchnet'; built-in models: alexnet"),
    (["show", "--model", "alexnet", "-o", "depth=3"], "has no option depth"),
    (["show", "--model", "alexnet", "-o", "batch_size=many"], "batch_size='many' is not a int"),
    (["show", "--model", "alexnet", "-o", "oops"], "write KEY=VALUE"),
    (["show", "-m", "lenet", "-s", "expert", "-c", "nowhere"], "nowhere"),
    (["show", "-m", "lenet", "-s", "best-ever"], "unknown strategy 'best-ever'"),
    (["show", "-m", "lenet", "-s", "nosuch.json"], "strategy file nosuch.json does not exist"),
    (["simulate", "-m", "lenet", "-s", "runs/best"], "strategy file runs/best does not exist"),
    (["search", "-m", "lenet", "--init", "nosuch.json", "--no-log"],
     "strategy file nosuch.json does not exist"),
    (["show", "-m", "lenet", "--export", "x.json"], "give --strategy too"),
])
def test_bad_input_exits_2_with_one_message(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_bad_cluster_file_names_file_and_field(capsys, tmp_path):
    bad = tmp_path / "mine.toml"
    bad.write_text('name = "mine"\n[device_kinds.X]\nmemory = "1GiB"\n'
                   'peak_flops = "1 TFLOPS"\nmem_bandwidth = "10 GB"\n'
                   '[nodes]\ncount = 1\ngpus_per_node = 1\ndevice = "X"\n')
    code, _, err = run(capsys, "show", "-m", "lenet", "-s", "expert", "-c", str(bad))
    assert code == 2 and "mine.toml" in err and "mem_bandwidth" in err


def test_python_dash_m_and_help_on_every_subcommand():
    for argv in ([], ["models"], ["clusters"], ["show"]):
        out = subprocess.run([sys.executable, "-m", "flextui", *argv, "--help"],
                             capture_output=True, text=True, timeout=HANG_S)
        assert out.returncode == 0 and "usage: flextui" in out.stdout


@pytest.mark.parametrize("argv, names", [
    (["simulate", "-m", "lenet", "--memory", "bad"], "'penalize', 'reject', 'ignore'"),
    (["simulate", "-m", "lenet", "--cost", "bad"], "'analytic', 'profiled', 'recorded', 'auto'"),
    (["launch", "-m", "lenet", "--lr-schedule", "bad"], "'constant', 'cosine', 'linear'"),
    (["export", "--format", "bad", "s.json"], "'torch'"),
])
def test_a_bad_name_lists_the_names_it_takes(capsys, argv, names):
    """Not the enum's repr (``<MemoryPolicy.PENALIZE: 'penalize'>``)."""
    with pytest.raises(SystemExit) as exit:
        main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and f"invalid choice: 'bad' (choose from {names})" in err
