"""``flextui launch --record-profile``: the task times ranks report, merged into the
profile cache under the keys the cost model of the launch's cluster looks up."""

import json

import pytest
import torch

from flextui.cli import main
from flextui.cost.cache import ProfileCache, ProfileEntry
from flextui.cost.choose import choose_cost_model
from flextui.cost.localdevice import cpu_name
from flextui.cost.signatures import Measurement, task_signatures
from flextui.errors import FlextuiError
from flextui.machine import load_named_cluster
from flextui.runtime.metrics import MAX_LINE, End, TaskRow, Tasks, encode
from flextui.runtime.recording import check_recording, merged_times, record_profile
from flextui.runtime.tasktimes import TaskTimes
from helpers import model


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def lenet():
    return model("lenet", batch_size=4)


def test_a_rank_reports_the_mean_time_of_one_task_over_its_steps():
    times = TaskTimes({(1, (4, 6, 28, 28)): 1, (3, (2, 16)): 2})
    times.add({(1, (4, 6, 28, 28), False): 0.010, (1, (4, 6, 28, 28), True): 0.030,
               (3, (2, 16), False): 0.004, (3, (2, 16), True): 0.008})
    times.add({(1, (4, 6, 28, 28), False): 0.020, (1, (4, 6, 28, 28), True): 0.050,
               (3, (2, 16), False): 0.008, (3, (2, 16), True): 0.004})
    assert times.rows() == [
        TaskRow(1, (4, 6, 28, 28), pytest.approx(0.015), pytest.approx(0.040), 2),
        TaskRow(3, (2, 16), pytest.approx(0.003), pytest.approx(0.003), 4)]
    [record] = times.records(1, "cpu: x, 1 thread")
    assert (record.rank, record.device, record.steps) == (1, "cpu: x, 1 thread", 2)


def test_many_task_times_are_split_into_lines_a_pipe_keeps_whole():
    counts = {(op, (64, 1024, 7 * op)): 1 for op in range(400)}
    times = TaskTimes(counts)
    times.add({(op, shape, backward): 1e-3 / 3 for (op, shape) in counts
               for backward in (False, True)})
    records = times.records(0, "cpu: " + "x" * 100 + ", 1 thread")
    assert len(records) > 1
    lines = [encode(r) for r in records]  # raises if too long
    assert all(len(line.encode()) <= MAX_LINE for line in lines)
    assert sum(len(r.tasks) for r in records) == 400


def _records(device, rank_rows):
    return [Tasks(rank, device, 5, tuple(TaskRow(op, tuple(shape), *rest) for op, shape, *rest
                                          in rows))
            for rank, rows in enumerate(rank_rows)]


def test_the_ranks_times_of_a_task_are_averaged_by_runs():
    graph = lenet()
    conv = graph.op("conv1").index
    records = _records("cpu: x, 1 thread", [
        [[conv, [2, 6, 28, 28], 0.010, 0.020, 5]],
        [[conv, [2, 6, 28, 28], 0.040, 0.050, 15], [conv, [4, 6, 28, 28], 0.1, 0.2, 5]]])
    merged = merged_times(graph, records + [End(0)])
    assert merged == {"cpu: x, 1 thread": {
        (conv, (2, 6, 28, 28)): (pytest.approx(0.0325), pytest.approx(0.0425), 20),
        (conv, (4, 6, 28, 28)): (0.1, 0.2, 5)}}


def test_making_the_batch_is_a_task_with_no_backward_pass():
    graph = lenet()
    assert graph.ops[0].type == "input"
    records = _records("cpu: x, 1 thread", [[[0, [2, 1, 28, 28], 0.01, None, 5]]])
    assert merged_times(graph, records) == {"cpu: x, 1 thread": {
        (0, (2, 1, 28, 28)): (0.01, 0.0, 5)}}


@pytest.mark.parametrize("row", [
    [99, [2, 6, 28, 28], 0.01, 0.02, 5],          # no such op
    [1, [3, 6, 28, 28], 0.01, 0.02, 5],           # 3 does not divide the batch of 4
    [1, [2, 6, 28], 0.01, 0.02, 5],               # a dim short
    [1, [2, 6, 28, 28], 0.01, None, 5],           # no backward time
])
def test_a_row_that_is_not_a_task_of_the_graph_is_left_out(row):
    graph = lenet()
    assert graph.op("conv1").index == 1 and graph.ops[0].type == "input"
    assert merged_times(graph, _records("cpu: x, 1 thread", [[row]])) == {}


def test_recorded_times_are_kept_apart_and_used_when_asked_for(tmp_path):
    """A launch's times go to the in-run cache, not the profiler's: --cost recorded
    takes them (the profiler's where no launch ran a task), --cost profiled keeps what
    the profiler measured alone."""
    graph, cluster = lenet(), load_named_cluster("local-cpu-2")
    device = cpu_name(1)
    measurement = Measurement("float32", True, device, torch.__version__)
    cache = ProfileCache(device, [tmp_path])
    for signature in task_signatures(graph, measurement, num_devices=2):
        cache.put(signature.key, ProfileEntry(1e-3, 2e-3, repeats=10, peak_memory_bytes=4096,
                                              measured_at=1.0))
    cache.save()
    conv = graph.op("conv1")
    half = (2, *conv.space_shape[1:])
    written = record_profile(graph, _records(device, [[[conv.index, list(half), 0.007, 0.009,
                                                         20]]]), str(tmp_path))
    in_run = tmp_path / "in-run"
    assert [(r.device, r.path, r.tasks, r.runs) for r in written] == \
        [(device, in_run / cache.path.name, 1, 20)]
    entry = ProfileCache(device, [in_run]).get(measurement.key(conv, half))
    assert (entry.forward_s, entry.backward_s, entry.repeats) == \
        (pytest.approx(0.007), pytest.approx(0.009), 20)
    assert entry.peak_memory_bytes == 4096   # what the profiler measured is kept
    assert ProfileCache(device, [tmp_path]).get(measurement.key(conv, half)).forward_s == 1e-3
    recorded = choose_cost_model(graph, cluster, "recorded", profiles=str(tmp_path)).model
    assert (recorded.op_cost(conv, half, cluster.devices[0]).forward_s,
            recorded.op_cost(conv, half, cluster.devices[0]).backward_s) == \
        (entry.forward_s, entry.backward_s)
    whole = (4, *conv.space_shape[1:])   # not recorded: the profiler's time
    assert recorded.op_cost(conv, whole, cluster.devices[0]).forward_s == 1e-3
    profiled = choose_cost_model(graph, cluster, "profiled", profiles=str(tmp_path)).model
    assert profiled.op_cost(conv, half, cluster.devices[0]).forward_s == 1e-3


def test_recorded_without_a_launchs_times_is_one_clear_error(tmp_path):
    with pytest.raises(FlextuiError, match="no profiles of cpu-rank .* in .*in-run.*record "
                       "them with `flextui launch --record-profile`"):
        choose_cost_model(lenet(), load_named_cluster("local-cpu-2"), "recorded",
                          profiles=str(tmp_path))


def test_a_profile_directory_that_cannot_be_written_is_refused_before_the_launch(tmp_path,
                                                                                  capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(FlextuiError, match="--record-profile: cannot write profiles to"):
        check_recording(str(blocker / "profiles"))
    assert check_recording(str(tmp_path / "new" / "dir")).is_dir()
    for argv in (["--profiles", str(blocker)], ["--check"]):
        code = main(["launch", "-m", "lenet", "--nproc-per-node", "2", "--record-profile",
                     "--run-log", str(tmp_path / "never.ffrun"), *argv])
        out, err = capsys.readouterr()
        assert code == 2 and err.startswith("flextui: error: --record-profile") \
            and err.count("\n") == 1, err
        assert "Traceback" not in out + err
    assert not (tmp_path / "never.ffrun").exists()


def test_record_tasks_travels_in_the_launch_plan():
    from flextui.runtime.spec import LaunchSpec, Training
    from flextui.strategy import builtin_strategy
    graph = lenet()
    strategy = builtin_strategy("data-parallel", graph, load_named_cluster("local-cpu-2"))
    for record in (False, True):
        spec = LaunchSpec(graph, strategy, 2, Training(record_tasks=record))
        assert LaunchSpec.decode(spec.encode(), "plan").training.record_tasks is record
    assert json.dumps(spec.to_dict()["training"]).count("record_tasks") == 1
