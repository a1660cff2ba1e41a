"""Each step of a run: its loss (the ranks' shares summed), learning rate, samples/s,
tokens/s and MFU, in ``launch --json``, the ``--log-dir`` CSV and ``runs show --json``,
equal to one process training the same model; joined from the ranks' records however
they interleave; an old run log (a long report's mean share) still reads."""

import csv
import json
import os
import subprocess
import sys

import pytest
import torch

from flextui.cli import main
from flextui.machine import load_named_cluster
from flextui.runtime.metrics import (
    MAX_LOSSES,
    RecordError,
    Reporter,
    Start,
    Steps,
    decode_record,
    read_line,
)
from flextui.runtime.reference import train_whole
from flextui.runtime.runlog import RunLogError, RunLogWriter, read_run_log
from flextui.runtime.stepfigures import ModelWork, StepJoin, StepRow, tokens_per_sample
from flextui.runtime.steplog import StepLog
from helpers import HANG_S
from processes import wait_gone
from runtime_models import small
from test_runtime_runlog import FINISHED, header

TRANSFORMER = ("-m", "transformer", "-o", "layers=1", "-o", "width=16", "-o", "heads=2",
               "-o", "seq_len=8", "-o", "vocab=50", "-b", "8")
ENV = {"OMP_NUM_THREADS": "1"}


def launch_json(tmp_path, *args):
    """``flextui launch ... --json`` on 2 CPU ranks to its end: its JSON and run log
    (every rank it started gone)."""
    proc = subprocess.run([sys.executable, "-m", "flextui", "launch", *TRANSFORMER,
                           "--nproc-per-node", "2", "--strategy", "random", "--json",
                           "--run-log", "run.ffrun", *args], cwd=tmp_path, text=True,
                          capture_output=True, env={**os.environ, **ENV}, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = read_run_log(tmp_path / "run.ffrun")
    assert wait_gone([r.pid for r in log.records if isinstance(r, Start)]) == []
    return json.loads(proc.stdout), log


def referee(log, steps, dtype=torch.float64):
    """The run's graph trained whole in one process, from the same start and data."""
    spec = log.header.spec
    t = spec.training
    return train_whole(spec.graph, steps, seed=t.seed, dtype=dtype,
                       optimizer=t.update, strategy=spec.strategy).losses


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_each_steps_loss_in_json_csv_and_runs_show_equals_one_process(tmp_path, capsys):
    shown, log = launch_json(tmp_path, "--steps", "3", "--warmup", "1", "--log-dir", "steps")
    rows = shown["per_step"]
    assert [(r["step"], r["warmup"]) for r in rows] == \
        [(0, True), (1, False), (2, False), (3, False)]
    # the ranks' shares summed: both ranks hold part of every step's loss
    shares = [r for r in log.records if isinstance(r, Steps)]
    assert {r.rank for r in shares if any(r.losses)} == {0, 1}
    # float32 ranks against the float64 referee: float32's rounding
    assert [r["loss"] for r in rows] == pytest.approx(referee(log, 4), rel=1e-6)
    assert {r["lr"] for r in rows} == {0.01}
    tokens = 8   # seq_len: the tokens of a sample
    assert shown["tokens_per_s"] == pytest.approx(shown["samples_per_s"] * tokens)
    work = ModelWork.of(log.header.spec, log.header.cluster)
    assert shown["flops_per_step"] == sum(log.header.spec.graph.total_flops()) > 0
    assert shown["peak_estimated"] is True and shown["peak_flops"] == work.peak_flops > 0
    assert shown["mfu"] == pytest.approx(
        shown["flops_per_step"] / shown["iteration_s"] / shown["peak_flops"])
    for row in rows:
        assert row["samples_per_s"] == pytest.approx(8 / row["step_s"])
        assert row["tokens_per_s"] == pytest.approx(row["samples_per_s"] * tokens)
    # the CSV: a row a step, the same values
    with open(tmp_path / "steps" / "run.csv", newline="") as f:
        written = list(csv.DictReader(f))
    assert [int(r["step"]) for r in written] == [0, 1, 2, 3]
    assert [float(r["loss"]) for r in written] == [r["loss"] for r in rows]
    assert [float(r["mfu"]) for r in written] == [r["mfu"] for r in rows]
    assert [r["warmup"] for r in written] == ["true", "false", "false", "false"]
    # the run log gives them again
    assert main(["runs", "show", str(tmp_path / "run.ffrun"), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["per_step"] == rows and again["mfu"] == shown["mfu"]
    assert main(["runs", "show", str(tmp_path / "run.ffrun")]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert f"loss {rows[-1]['loss']:.6g} at step 3" in said
    assert "tokens/s" in said and "(of an estimated CPU peak)" in said


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_a_checks_steps_equal_one_process_in_float64(tmp_path):
    """A check runs float64 throughout: each step's loss as the launcher sums the ranks'
    shares equals one process to 1e-9, as the ranks' all-reduced sums do."""
    shown, log = launch_json(tmp_path, "--check")
    assert shown["equal"], shown
    losses = [r["loss"] for r in shown["per_step"]]
    assert len(losses) == 3
    assert losses == pytest.approx(referee(log, 3), rel=1e-9)


def test_a_rank_reports_every_steps_share_however_quick_its_steps():
    """Ranks quicker than MAX_LOSSES steps a report sent the mean of their shares, so
    no step's loss could be known."""
    lines = []
    reporter = Reporter(0, lines.append, lambda: 0, lambda: None)
    shares = [1.0 + step / 7 for step in range(5 * MAX_LOSSES)]
    for step, share in enumerate(shares):
        reporter.step(step, False, share, 0.001, 0.001, 0.0, 0, 0,
                      last=step == len(shares) - 1)
    records = [read_line(line, "rank 0") for line in lines]
    assert all(len(r.losses) == r.count <= MAX_LOSSES for r in records)
    assert [x for r in records for x in r.losses] == shares


def test_a_steps_record_with_as_many_losses_as_neither_steps_nor_one_is_refused():
    record = Steps(0, 0, 4, False, 0.1, 0.1, 0.0, 0, 0, (1.0, 2.0), 0, None).to_dict()
    with pytest.raises(RecordError, match="losses: expected one value per step"):
        decode_record(record, "rank 0")


def steps(rank, first, last, losses, step_s=0.01):
    count = last - first + 1
    return Steps(rank, first, last, False, step_s * count, step_s * count, 0.0, 0, 0,
                 tuple(losses), 2**20, None)


def test_steps_are_joined_in_order_once_every_rank_reported_them():
    spec = header().spec
    join = StepJoin(2, ModelWork.of(spec, load_named_cluster("local-cpu-2")), spec.training)
    assert join.add(steps(0, 0, 2, (1.0, 2.0, 3.0))) == []
    rows = join.add(steps(1, 0, 0, (0.5,), step_s=0.02))
    assert [(r.step, r.loss, r.step_s) for r in rows] == [(0, 1.5, 0.02)]
    rows = join.add(steps(1, 1, 3, (0.25, 0.125, 9.0)))
    assert [(r.step, r.loss, r.step_s) for r in rows] == [(1, 2.25, 0.01), (2, 3.125, 0.01)]
    assert [r.step for r in join.add(steps(0, 3, 3, (1.0,)))] == [3]
    assert join.pending == {}


def test_tokens_are_counted_for_models_of_token_ids_only():
    assert tokens_per_sample(small("transformer")) == 8
    assert tokens_per_sample(small("lenet")) is None
    assert tokens_per_sample(small("dlrm")) is None


def test_an_old_run_log_whose_long_report_kept_a_mean_still_reads(tmp_path, capsys):
    """A run log written before every step's share was kept: a report of more than
    MAX_LOSSES steps held their mean alone. It reads; those steps have no loss, and the
    steps reported one by one have theirs."""
    path = tmp_path / "old.ffrun"
    log = RunLogWriter(path, header())
    count = MAX_LOSSES + 36
    for rank in (0, 1):
        log.record(Start(rank, 1000 + rank, "localhost", "cpu", count + 1, 0))
        log.record(steps(rank, 0, count - 1, (0.75,)))
        log.record(steps(rank, count, count, (0.5 + rank,)))
    log.final(FINISHED)
    log.close()
    assert main(["runs", "show", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["per_step"]
    assert len(rows) == count + 1 and {r["loss"] for r in rows[:count]} == {None}
    assert rows[-1]["loss"] == 2.0 and rows[-1]["tokens_per_s"] is None   # LeNet
    assert main(["runs", "show", str(path)]) == 0
    assert f"loss 2 at step {count}" in capsys.readouterr().out


def test_the_step_log_never_overwrites_a_file(tmp_path):
    (tmp_path / "run.csv").write_text("kept")
    with pytest.raises(RunLogError, match="exists; a step log is never overwritten"):
        StepLog(tmp_path, "run")
    assert (tmp_path / "run.csv").read_text() == "kept"


def test_a_log_dir_that_cannot_be_made_is_one_message_and_no_run_starts(tmp_path, capsys,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")
    code = main(["launch", "-m", "lenet", "--nproc-per-node", "2", "--headless",
                 "--run-log", "run.ffrun", "--log-dir", "a-file/steps"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot write step log a-file/steps/run.csv: Not a directory" in err
    assert "Traceback" not in err and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_the_step_log_writes_tensorboard_scalars_where_it_imports(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = StepLog(tmp_path, "run")
    rows = [StepRow(step, step == 0, 3.0 - step, 0.01, 0.02, 400.0, 3200.0, None)
            for step in range(3)]
    for row in rows:
        log.row(row)
    log.close()
    events = EventAccumulator(str(tmp_path / "run"))
    events.Reload()
    assert "mfu" not in events.Tags()["scalars"]           # none known: none written
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(0, 3.0), (1, 2.0), (2, 1.0)]
    assert [e.value for e in events.Scalars("tokens_per_s")] == [3200.0] * 3
    with open(tmp_path / "run.csv", newline="") as f:
        assert [r["mfu"] for r in csv.DictReader(f)] == [""] * 3
