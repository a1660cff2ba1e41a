"""``flextui launch --record-profile`` with real gloo ranks: the task times the ranks
measured land in the profile cache, and the cost model of the launch's cluster uses
them. The ranks' PIDs come from the run log; the test asserts none survives."""

import json

import pytest
import torch

from flextui.cost.choose import choose_cost_model
from flextui.cost.localdevice import cpu_name
from flextui.cost.signatures import Measurement
from flextui.graph.library import load_model
from flextui.graph.region import region_shape
from flextui.machine import load_named_cluster
from flextui.runtime.metrics import Tasks
from flextui.runtime.recording import merged_times
from flextui.runtime.runlog import read_run_log
from flextui.sim import Simulator, TaskKind
from flextui.strategy import builtin_strategy
from helpers import HANG_S
from test_runtime_ranks import end, launch, starts, wait_gone

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("gloo")]


def test_recorded_task_times_are_used_by_the_next_search(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    profiles, log = tmp_path / "profiles", tmp_path / "run.ffrun"
    proc = launch(tmp_path, "-m", "lenet", "-b", "16", "--nproc-per-node", "2", "--strategy",
                  "expert", "--steps", "3", "--warmup", "1", "--run-log", str(log),
                  "--record-profile", "--profiles", str(profiles), "--json")
    try:
        out, err = proc.communicate(timeout=HANG_S)
        assert proc.returncode == 0, err[-3000:]
        assert wait_gone(starts(log).values()) == []
    finally:
        end([proc.pid, *starts(log).values()])
    summary = json.loads(out)
    [written] = summary["recorded_profile"]
    assert written["device"] == cpu_name(1) and \
        written["file"].startswith(str(profiles / "in-run"))
    graph = load_model("lenet", batch_size=16)
    records = read_run_log(log).records
    assert {r.rank for r in records if isinstance(r, Tasks)} == {0, 1}
    [measured] = merged_times(graph, records).values()
    assert written["tasks"] == len(measured) and written["runs"] == sum(
        runs for _, _, runs in measured.values())
    # every op ran, each step, on some rank (a graph input's task makes its block of the
    # batch): 3 timed steps of each task
    assert {graph.ops[op].name for op, _ in measured} == {op.name for op in graph.ops}
    cluster = load_named_cluster("local-cpu-2")
    model = choose_cost_model(graph, cluster, "recorded", profiles=str(profiles)).model
    measurement = Measurement("float32", True, cpu_name(1), torch.__version__)
    for (op, shape), (forward, backward, _) in measured.items():
        cost = model.op_cost(graph.ops[op], shape, cluster.devices[0])
        assert (cost.forward_s, cost.backward_s) == (forward, backward)
        assert forward > 0 and (backward > 0) == (graph.ops[op].type != "input")
        assert measurement.key(graph.ops[op], shape).encoded in model.times
    # the simulator times making the batch as the ranks did
    expert = builtin_strategy("expert", graph, cluster)
    making = [t for t in Simulator(graph, cluster, model).simulate(expert).tasks
              if t.kind == TaskKind.FORWARD and t.op == "images"]
    images = graph.op("images")
    assert making and all(
        t.end - t.start == measured[(images.index, region_shape(
            expert["images"].task_region(images, t.part)))][0] for t in making)
