"""Run logs (.ffrun): written record by record, read back after a crash, and shown as
measured against simulated by ``flextui runs show``."""

import json

import pytest

from flextui.cli import main
from flextui.machine import load_named_cluster
from flextui.runtime.metrics import Start, Steps
from flextui.runtime.runlog import MAGIC, RunLogError, RunLogWriter, read_run_log
from flextui.runtime.spec import LaunchSpec, Training
from flextui.strategy import builtin_strategy
from runtime_models import small


def header(ranks=2):
    graph, cluster = small("lenet"), load_named_cluster(f"local-cpu-{ranks}")
    spec = LaunchSpec(graph, builtin_strategy("data-parallel", graph, cluster), ranks,
                      Training())
    return {**spec.to_dict(), "graph_hash": graph.fingerprint, "cluster": cluster.to_dict(),
            "commands": [["torchrun"]], "hosts": ["localhost"],
            "simulated": {"iteration_s": 0.010, "busy_s": [0.008, 0.004],
                          "cost_model": "analytic"}}


def steps(rank, first, last, step_s, compute_s, warmup=False):
    count = last - first + 1
    return Steps(rank, first, last, warmup, step_s * count, compute_s * count, 0.001 * count,
                 100 * count, 100 * count, (1.0,) * count, 2**20, None)


def write(path, final=True):
    log = RunLogWriter(path, header())
    for rank in (0, 1):
        log.record(Start(rank, 1000 + rank, "localhost", "cpu", 10, 2))
        log.record(steps(rank, 0, 1, 0.5, 0.4, warmup=True))
        log.record(steps(rank, 2, 11, 0.012 if rank == 0 else 0.011,
                         0.010 if rank == 0 else 0.004))
    log.output(1, "a line of rank 1")
    if final:
        log.final("finished", 0, None, "finished in 3.0 s", 3.0)
    log.close()


def test_runs_show_prints_measured_against_simulated(tmp_path, capsys):
    path = tmp_path / "run.ffrun"
    write(path)
    assert main(["runs", "show", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "finished" and shown["steps"] == 10
    assert shown["iteration_s"] == pytest.approx(0.012)          # the slowest rank's step
    assert shown["iteration_error"] == pytest.approx(0.2)
    rank0, rank1 = shown["devices"]
    assert rank0["busy_s"] == pytest.approx(0.010) and rank0["busy_error"] == pytest.approx(0.25)
    assert rank1["busy_error"] == pytest.approx(0.0)
    assert main(["runs", "show", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "n0.rank0" in out and "+25%" in out and "12.00 ms measured, 10.00 ms simulated" in out


def test_a_log_cut_short_reads_to_its_last_whole_record(tmp_path, capsys):
    path = tmp_path / "cut.ffrun"
    write(path, final=False)
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    log = read_run_log(path)
    assert log.truncated and log.final is None and log.output == []
    assert len(log.records) == 6
    assert main(["runs", "show", str(path)]) == 0
    assert "cut short" in capsys.readouterr().out


def test_bad_run_logs_are_one_message(tmp_path, capsys):
    foreign = tmp_path / "foreign.ffrun"
    foreign.write_bytes(b"not a run log")
    assert main(["runs", "show", str(foreign)]) == 2
    assert "not a flextui run log" in capsys.readouterr().err
    damaged = tmp_path / "damaged.ffrun"
    write(damaged)
    data = bytearray(damaged.read_bytes())
    data[len(MAGIC) + 40] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with pytest.raises(Exception, match="corrupt"):
        read_run_log(damaged)
    assert main(["runs", "show", str(tmp_path / "missing.ffrun")]) == 2
    with pytest.raises(RunLogError, match="exists"):
        RunLogWriter(damaged, header())
