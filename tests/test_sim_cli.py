"""`flextui simulate`: summary, JSON, Chrome trace, and clear errors."""

import json

import pytest

from flextui.cli import main
from flextui.sim import TaskKind


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_simulate_json_and_trace(capsys, tmp_path):
    trace = tmp_path / "t.json"
    code, out, _ = run(capsys, "simulate", "-m", "lenet", "-c", "dgx-a100", "-s", "expert",
                       "--json", "--trace", str(trace))
    data = json.loads(out)
    assert code == 0 and data["strategy"] == "expert" and data["training"]
    assert data["throughput_samples_per_s"] == pytest.approx(64 / data["iteration_s"])
    assert len(data["devices"]) == 8 and data["communication_bytes"] > 0
    events = json.loads(trace.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in spans} >= {"forward", "backward", "transfer", "update"}
    end = max(e["ts"] + e["dur"] for e in spans)
    assert end == pytest.approx(data["iteration_s"] * 1e6)


def test_simulate_inference_has_no_backward(capsys):
    code, out, _ = run(capsys, "simulate", "-m", "alexnet", "-c", "dgx-h100", "--inference", "--json")
    assert code == 0 and json.loads(out)["training"] is False
    code, out, _ = run(capsys, "simulate", "-m", "alexnet", "-c", "dgx-h100")
    assert code == 0 and "ms per training iteration" in out and "top ops" in out


def test_adamw_keeps_two_states_of_every_parameter(capsys):
    memory = {}
    for optimizer in ("sgd", "adamw"):
        code, out, _ = run(capsys, "simulate", "-m", "lenet", "-c", "local-cpu-4", "-s",
                           "data-parallel", "--optimizer", optimizer, "--json")
        assert code == 0
        memory[optimizer] = json.loads(out)["devices"][0]["memory"]
    assert memory["sgd"]["optimizer"] == memory["sgd"]["parameters"] > 0
    assert memory["adamw"]["optimizer"] == 2 * memory["adamw"]["parameters"]
    with pytest.raises(SystemExit) as exit:
        main(["search", "-m", "lenet", "--optimizer", "adam", "--no-log"])
    assert exit.value.code == 2
    assert "--optimizer: invalid choice: 'adam' (choose from 'sgd', 'adamw')" in \
        capsys.readouterr().err


def test_strategy_file_reproduces_its_simulation(capsys, tmp_path):
    path = tmp_path / "s.json"
    run(capsys, "show", "-m", "rnnlm2", "-c", "p100-4x4", "-s", "random", "--export", str(path))
    _, a, _ = run(capsys, "simulate", "-m", "rnnlm2", "-c", "p100-4x4", "-s", "random", "--json")
    _, b, _ = run(capsys, "simulate", "-m", "rnnlm2", "-c", "p100-4x4", "-s", str(path), "--json")
    assert json.loads(a)["iteration_s"] == json.loads(b)["iteration_s"]


def test_disconnected_cluster_names_the_devices(capsys, tmp_path):
    toml = tmp_path / "islands.toml"
    toml.write_text('[device_kinds.G]\nmemory = "16GiB"\npeak_flops = "10 TFLOPS"\n'
                    'mem_bandwidth = "500 GB/s"\n'
                    '[[devices]]\nname = "a"\nkind = "G"\nnode = 0\n'
                    '[[devices]]\nname = "b"\nkind = "G"\nnode = 1\n')
    code, _, err = run(capsys, "simulate", "-m", "lenet", "-c", str(toml))
    assert code == 2 and "parameter 'conv1.weight' are all-reduced" in err
    assert "no route from a to b" in err
    code, _, err = run(capsys, "simulate", "-m", "lenet", "-c", str(toml), "-s", "model-parallel")
    assert code == 2 and "needs data from op" in err and "no route from a to b" in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_bad_strategy_for_simulate(capsys):
    code, _, err = run(capsys, "simulate", "-m", "lenet", "-s", "nope.json")
    assert code == 2 and "strategy file nope.json does not exist" in err


def test_task_kinds_are_named_in_the_trace():
    assert [k.name.lower() for k in TaskKind] == ["forward", "backward", "transfer", "sync", "update",
                                                 "gather"]
