"""Run logs (.ffrun): written record by record, read back after a crash, and shown as
measured against simulated by ``flextui runs show``."""

import json
import os
import subprocess
import sys

import pytest

from flextui.cli import main
from flextui.documents import pack
from flextui.machine import load_named_cluster
from flextui.runtime.launch import Outcome, RunStatus
from flextui.runtime.metrics import Start, Steps
from flextui.runtime.runlog import MAGIC, RunHeader, RunLogError, RunLogWriter, read_run_log
from flextui.runtime.spec import LaunchSpec, Training
from flextui.runtime.summary import Simulated
from flextui.runtime.target import LaunchTarget
from flextui.search.logformat import frame
from flextui.strategy import Strategy, builtin_strategy
from helpers import HANG_S
from runtime_models import small


def header(ranks=2, strategy="data-parallel"):
    graph, cluster = small("lenet"), load_named_cluster(f"local-cpu-{ranks}")
    spec = LaunchSpec(graph, Strategy(builtin_strategy("data-parallel", graph, cluster),
                                      strategy), ranks, Training())
    return RunHeader(spec, cluster, (("torchrun",),), LaunchTarget(port=29500, run_id="r1"),
                     Simulated(0.010, (0.008, 0.004), "analytic"))


def steps(rank, first, last, step_s, compute_s, warmup=False):
    count = last - first + 1
    return Steps(rank, first, last, warmup, step_s * count, compute_s * count, 0.001 * count,
                 100 * count, 100 * count, (1.0,) * count, 2**20, None)


FINISHED = Outcome(RunStatus.FINISHED, 0, None, "finished in 3.0 s", 3.0)


def write(path, final=FINISHED, strategy="data-parallel"):
    log = RunLogWriter(path, header(strategy=strategy))
    for rank in (0, 1):
        log.record(Start(rank, 1000 + rank, "localhost", "cpu", 10, 2))
        log.record(steps(rank, 0, 1, 0.5, 0.4, warmup=True))
        log.record(steps(rank, 2, 11, 0.012 if rank == 0 else 0.011,
                         0.010 if rank == 0 else 0.004))
    log.output(1, "a line of rank 1")
    if final:
        log.final(final)
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
    write(path, final=None)
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


def test_a_fifo_given_as_a_run_log_is_refused_at_once(tmp_path):
    """``runs show`` read the file it was given whatever it was: a FIFO held it until
    something wrote to it, forever."""
    fifo = tmp_path / "pipe.ffrun"
    os.mkfifo(fifo)
    shown = subprocess.run([sys.executable, "-m", "flextui", "runs", "show", str(fifo)],
                           capture_output=True, text=True, timeout=HANG_S)  # a hang, not slow
    assert shown.returncode == 2, shown.stderr
    assert shown.stderr == (f"flextui: error: {fifo}: a FIFO (a named pipe), not a regular "
                            "file; give the path of a file\n")


def test_a_log_reads_back_as_typed_values(tmp_path):
    path = tmp_path / "typed.ffrun"
    write(path)
    log = read_run_log(path)
    written = header()
    assert (log.header.spec.graph.fingerprint, log.header.spec.strategy.name) == \
        (written.spec.graph.fingerprint, written.spec.strategy.name)
    assert log.header.spec.training == written.spec.training
    assert (log.header.cluster.name, log.header.commands, log.header.target,
            log.header.simulated) == (written.cluster.name, written.commands, written.target,
                                      written.simulated)
    assert log.header.created and log.header.version == 2
    assert log.records[0] == Start(0, 1000, "localhost", "cpu", 10, 2)
    assert log.records[1] == steps(0, 0, 1, 0.5, 0.4, warmup=True)
    assert log.output == [(1, "a line of rank 1")]
    assert log.final == FINISHED
    assert log.status == "finished"


def framed(path, *records):
    """A run log of ``records`` (each [tag, ...]) as written, whatever they hold."""
    path.write_bytes(MAGIC + b"".join(frame(pack(r)) for r in records))
    return path


@pytest.mark.parametrize("damage, problem", [
    (lambda h, rec, fin: ([0, {**h, "version": 9}], rec, fin),
     "header: written by a newer flextui .* upgrade flextui to read it"),
    (lambda h, rec, fin: ([0, {**h, "num_ranks": 3}], rec, fin),
     "header cluster: 2 devices for 3 ranks"),
    (lambda h, rec, fin: ([0, {k: v for k, v in h.items() if k != "target"}], rec, fin),
     "header: missing target"),
    (lambda h, rec, fin: ([0, {**h, "graph_hash": "x"}], rec, fin),
     "header graph_hash: the graph does not match its recorded hash"),
    (lambda h, rec, fin: ([0, {**h, "simulated": {"iteration_s": 1.0, "busy_s": [1.0],
                                                  "cost_model": "analytic"}}], rec, fin),
     "header simulated busy_s: expected a list of 2 items"),
    (lambda h, rec, fin: ([0, h], [1, {"kind": "steps", "rank": 0}], fin),
     "record 1 at byte .*: steps: missing first, last"),
    (lambda h, rec, fin: ([0, h], rec, [3, {**fin[1], "status": "done"}]),
     "record 2 at byte .* final status: expected one of finished, failed, stopped"),
    (lambda h, rec, fin: ([0, h], fin, rec),
     "record 2 at byte .*: a record after the final record"),
])
def test_a_damaged_field_is_one_message_naming_it(tmp_path, capsys, damage, problem):
    h = {**header().to_dict(), "created": "2026-11-26T00:00:00"}
    record = [1, Start(0, 10, "localhost", "cpu", 10, 2).to_dict()]
    final = [3, Outcome(RunStatus.FINISHED, 0, None, "finished", 1.0).to_dict()]
    path = framed(tmp_path / "bad.ffrun", *damage(h, record, final))
    with pytest.raises(RunLogError, match=f"^{path}: {problem}"):
        read_run_log(path)
    assert main(["runs", "show", str(path)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_runs_show_prints_what_the_log_says_as_it_is(tmp_path, capsys, monkeypatch):
    """gloo's errors name their source as [path:line], and a strategy file names itself:
    Rich took them for markup (MarkupError: a traceback instead of the table)."""
    said = ("rank 0 on localhost failed: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/"
            "gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:40000")
    path = tmp_path / "gloo.ffrun"
    write(path, final=Outcome(RunStatus.FAILED, 1, 0, said, 2.0), strategy="mine[/v2]")
    monkeypatch.setenv("COLUMNS", "1000")
    assert main(["runs", "show", str(path)]) == 0
    out, err = capsys.readouterr()
    assert f"failed: {said}" in out and "lenet (mine[/v2]) on 2 ranks" in out, err


ESCAPES = "\x1b]0;pwned\x07 \x1b]52;c;ZXZpbA==\x07 \x1b[2J"   # title, clipboard, clear


def test_runs_show_escapes_what_a_rank_said(tmp_path, capsys, monkeypatch):
    """A rank's last line, quoted in the final message, reached the terminal raw: the
    escapes that set its title, write its clipboard and clear it."""
    path = tmp_path / "escapes.ffrun"
    write(path, final=Outcome(RunStatus.FAILED, 1, 0, f"rank 0 on localhost failed: {ESCAPES}",
                              2.0))
    monkeypatch.setenv("COLUMNS", "1000")
    assert main(["runs", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;pwned\\x07 \\x1b]52;c;ZXZpbA==\\x07 \\x1b[2J" in out


def test_a_version_1_log_names_its_hosts_as_its_target(tmp_path):
    """Before the target was kept, a header named only its hosts (["localhost"] on this
    machine): such a log still reads, its target those hosts."""
    body = {**header().to_dict(), "version": 1, "created": "2026-11-25T10:00:00"}
    del body["target"], body["model"]
    for hosts, local in ((["localhost"], True), (["gpu1", "gpu2"], False)):
        path = tmp_path / f"v1-{len(hosts)}.ffrun"
        path.write_bytes(MAGIC + frame(pack([0, {**body, "hosts": hosts}])))
        target = read_run_log(path).header.target
        assert target.local == local and target.host_names() == hosts
        assert (target.port, target.run_id) == (None, "")


def test_a_header_target_that_names_hosts_wrongly_is_refused(tmp_path):
    body = header().to_dict() | {"created": "2026-11-26T10:00:00"}
    for target, said in (({**body["target"], "hosts": ["-Fevil@h1"]}, "starts with '-'"),
                         ({**body["target"], "ssh": ["ssh"]}, "only for hosts")):
        path = tmp_path / "bad-target.ffrun"
        path.write_bytes(MAGIC + frame(pack([0, {**body, "target": target}])))
        with pytest.raises(RunLogError, match=said):
            read_run_log(path)
        path.unlink()
