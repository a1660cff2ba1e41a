"""--batch-per-device: the FlexFlow paper's batch convention (N samples on each device, a
global batch of N x the devices of the cluster a command targets) on search, simulate,
show and launch."""

import json
from pathlib import Path

import pytest

from flextui.cli import main
from flextui.search import read_search_log

LIBRARY = Path(__file__).parent.parent / "library" / "models"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, *argv) -> str:
    """What argparse says refusing ``argv`` (exit 2): its error line."""
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and not out and "Traceback" not in err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1, err
    return errors[0]


#: each command with what it needs to run on p100-4x4 (16 devices) but the batch
COMMANDS = {
    "simulate": ["simulate", "-m", "lenet", "-c", "p100-4x4", "--json"],
    "show": ["show", "-m", "lenet", "-c", "p100-4x4", "--json"],
    "search": ["search", "-m", "lenet", "-c", "p100-4x4", "--budget", "10", "--json"],
    "launch": ["launch", "-m", "lenet", "--nproc-per-node", "2", "--dry-run", "--json"],
}


def test_the_global_batch_is_the_per_device_batch_times_the_clusters_devices(capsys,
                                                                              tmp_path):
    code, out, _ = run(capsys, *COMMANDS["simulate"], "--batch-per-device", "64")
    assert code == 0 and json.loads(out)["batch_size"] == 1024
    code, out, _ = run(capsys, *COMMANDS["show"], "--batch-per-device", "64")
    assert code == 0 and json.loads(out)["summary"]["batch_size"] == 1024
    log = tmp_path / "run.ffsearch"
    code, _, _ = run(capsys, *COMMANDS["search"], "--batch-per-device", "64", "--out", str(log),
                     "--export-strategy", str(tmp_path / "best.json"))
    assert code == 0 and read_search_log(log).header.graph.batch_size == 1024
    # a launch's devices are its ranks: two CPU processes here
    code, out, _ = run(capsys, *COMMANDS["launch"], "--batch-per-device", "64")
    assert code == 0 and json.loads(out)["batch_size"] == 128


def test_show_without_a_strategy_counts_the_devices_of_cluster(capsys):
    code, out, _ = run(capsys, "show", "-m", "lenet", "--batch-per-device", "64")
    assert code == 0
    assert "batch 256 (64 per device × the 4 devices of p100-4x4@1node)" in " ".join(out.split())


@pytest.mark.parametrize("command", COMMANDS)
def test_both_batch_flags_are_one_message(capsys, command):
    line = refused(capsys, *COMMANDS[command], "-b", "1024", "--batch-per-device", "64")
    assert "--batch-per-device: not allowed with argument --batch-size" in line


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("value, problem", [("0", "must be at least 1"),
                                            ("-3", "must be at least 1"),
                                            ("x", "'x': give a whole number")])
def test_a_bad_per_device_batch_names_the_flag(capsys, command, value, problem):
    line = refused(capsys, *COMMANDS[command], "--batch-per-device", value)
    assert line.endswith(f"argument --batch-per-device: {problem}")


def test_a_per_device_batch_past_any_batch_names_the_flag(capsys):
    code, out, err = run(capsys, *COMMANDS["simulate"], "--batch-per-device", "100000")
    assert code == 2 and not out
    assert err == ("flextui: error: --batch-per-device 100,000 on 16 devices is a batch of "
                   "more than 1,048,576: give at most 65,536\n")


def test_the_global_batch_meets_the_models_checks(capsys, tmp_path):
    """A global batch the model refuses is refused as that --batch-size is."""
    small = tmp_path / "small_mlp.py"
    small.write_text((LIBRARY / "mlp.py").read_text().replace(
        'RANGES = {', 'RANGES = {"batch_size": (1, 512), '))
    code, _, err = run(capsys, "simulate", "-m", str(small), "-c", "p100-4x4",
                       "--batch-per-device", "64")
    by_size = run(capsys, "simulate", "-m", str(small), "-c", "p100-4x4", "-b", "1024")
    assert code == by_size[0] == 2 and err == by_size[2]
    assert "batch_size=1,024 is out of range; give 1 to 512" in err


def test_a_strategy_made_for_another_batch_is_refused(capsys, tmp_path):
    made = tmp_path / "dp.json"
    code, _, _ = run(capsys, "show", "-m", "lenet", "-c", "p100-4x4", "--strategy",
                     "data-parallel", "--batch-per-device", "64", "--export", str(made))
    assert code == 0
    code, out, _ = run(capsys, "simulate", "-m", "lenet", "-c", "p100-4x4", "-b", "1024",
                       "--strategy", str(made), "--json")
    assert code == 0 and json.loads(out)["batch_size"] == 1024
    code, _, err = run(capsys, "show", "-m", "lenet", "-c", "p100-4x4", "--strategy",
                       str(made), "--batch-per-device", "32")
    assert code == 2 and "was made for another graph" in err and "batch 512" in err


def test_a_resumed_search_checks_the_per_device_batch(capsys, tmp_path):
    log = tmp_path / "run.ffsearch"
    assert run(capsys, "search", "-m", "lenet", "-c", "p100-4x4", "--batch-per-device", "16",
               "--budget", "30", "--out", str(log))[0] == 0
    torn = tmp_path / "torn.ffsearch"
    torn.write_bytes(log.read_bytes()[:read_search_log(log).record_offsets[-1]])
    code, _, err = run(capsys, "search", "--resume", str(torn), "--batch-per-device", "8")
    assert code == 2 and "not the model this search ran on" in err
    code, out, _ = run(capsys, "search", "--resume", str(torn), "--batch-per-device", "16",
                       "--json")
    assert code == 0 and read_search_log(torn).header.graph.batch_size == 256


def test_models_say_the_papers_batch_per_device(capsys, monkeypatch):
    code, out, _ = run(capsys, "models", "--json")
    paper = {m["name"]: m["paper_batch_per_device"] for m in json.loads(out)}
    assert code == 0 and paper["alexnet"] == 256 and paper["lenet"] is None
    assert all(paper[name] == 64 for name in
               ("inception_v3", "resnet101", "rnntc", "rnnlm", "nmt"))
    monkeypatch.setenv("COLUMNS", "200")  # each row on one line
    code, out, _ = run(capsys, "models")
    text = " ".join(out.split())
    assert code == 0 and "paper: 256 per device" in text and "--batch-per-device" in text
