"""The Gantt chart's core: lanes, exact rasterisation, windows, ticks, task details."""

import pytest

from flextui.cost import AnalyticCostModel
from flextui.graph import region_volume
from flextui.graph.tensor import dtype_bytes
from flextui.machine import load_named_cluster
from flextui.machine.units import format_bytes
from flextui.session.gantt import (
    IDLE_CELL,
    KIND_GLYPHS,
    Cell,
    View,
    build_lanes,
    format_window,
    nearest_task,
    rasterize,
    short_names,
    task_details,
    ticks,
)
from flextui.sim import (
    DeviceStats,
    LinkStats,
    MemoryUsage,
    Simulator,
    TaskKind,
    TaskTiming,
    Timeline,
)
from flextui.strategy import ShardStage, builtin_strategy
from helpers import model

F, B, T, S, U = (TaskKind.FORWARD, TaskKind.BACKWARD, TaskKind.TRANSFER, TaskKind.SYNC,
                 TaskKind.UPDATE)


def task(kind, start, end, *resources, op="", part=0, nbytes=0):
    return TaskTiming((int(kind), start, op), kind, op, part, resources, start, start, end, nbytes)


def tiny_timeline() -> Timeline:
    """d0: forward [0,1), backward [2.5,3), update [3,3.25); d1: forward [2,2.25) and
    [2.3,2.6), backward [2.6,3); a transfer on d0->d1 [1,2); a sync on both links [3,4)."""
    tasks = [task(F, 0.0, 1.0, "d0", op="a", nbytes=4096),
             task(T, 1.0, 2.0, "d0->d1", op="b", nbytes=1024),
             task(F, 2.0, 2.25, "d1", op="b"), task(F, 2.3, 2.6, "d1", op="c"),
             task(B, 2.5, 3.0, "d0", op="a"), task(B, 2.6, 3.0, "d1", op="c"),
             task(U, 3.0, 3.25, "d0", part=0, nbytes=64),
             task(S, 3.0, 4.0, "d0->d1", "d1->d0", nbytes=32)]
    memory = MemoryUsage(1, 1, 1, 1, 0, 100)
    devices = [DeviceStats(name, 0.0, 0.0, 0, 0, memory) for name in ("d0", "d1")]
    links = [LinkStats(name, "test", 0.0, 0) for name in ("d0->d1", "d1->d0", "x->y")]
    return Timeline(4.0, tasks, devices, links)


@pytest.fixture
def lanes():
    return {lane.name: lane for lane in build_lanes(tiny_timeline())}


def test_lanes_are_devices_then_links_that_carry_tasks():
    lanes = build_lanes(tiny_timeline())
    assert [(lane.name, lane.kind) for lane in lanes] == [
        ("d0", "device"), ("d1", "device"), ("d0->d1", "link"), ("d1->d0", "link")]
    d0 = lanes[0]
    assert [(t.kind, t.start) for t in d0.tasks] == [(F, 0.0), (B, 2.5), (U, 3.0)]
    assert d0.busy == pytest.approx(1.75 / 4)
    assert [t.kind for t in lanes[3].tasks] == [S]  # a sync shows on every link it holds


def test_rasterize_whole_cells(lanes):
    cells = rasterize(lanes["d0"], 0.0, 4.0, 8)  # cells 0.5 wide
    assert cells == [Cell(F, 0), Cell(F, 0), IDLE_CELL, IDLE_CELL, IDLE_CELL, Cell(B, 1),
                     Cell(U, 2), IDLE_CELL]


def test_rasterize_the_kind_covering_most_of_a_cell_wins(lanes):
    assert rasterize(lanes["d0"], 0.0, 4.0, 2) == [Cell(F, 0), Cell(B, 1)]  # 0.5 bwd, 0.25 update
    assert rasterize(lanes["d0"], 0.0, 4.0, 4) == [Cell(F, 0), IDLE_CELL, Cell(B, 1), Cell(U, 2)]
    # [2, 3) on d1: forward 0.25 + 0.3 beats one backward of 0.4; its longest forward is shown
    assert rasterize(lanes["d1"], 2.0, 3.0, 1) == [Cell(F, 1)]


def test_rasterize_a_window_inside_the_iteration(lanes):
    assert rasterize(lanes["d0->d1"], 1.5, 3.5, 4) == [Cell(T, 0), IDLE_CELL, IDLE_CELL,
                                                        Cell(S, 1)]
    assert rasterize(lanes["d0"], 0.75, 1.0, 2) == [Cell(F, 0), Cell(F, 0)]
    assert rasterize(lanes["d0"], 5.0, 6.0, 3) == [IDLE_CELL] * 3
    assert rasterize(lanes["d0"], 1.0, 1.0, 2) == [IDLE_CELL] * 2


def test_nearest_task(lanes):
    d0 = lanes["d0"]
    assert [nearest_task(d0, t) for t in (0.5, 1.5, 1.9, 2.9, 3.1, 9.0)] == [0, 0, 1, 1, 2, 2]
    assert nearest_task(lanes["d1->d0"], 0.0) == 0


def test_view_zoom_pan_and_clamp():
    whole = View.whole(4.0)
    assert (whole.t0, whole.t1) == (0.0, 4.0)
    assert whole.zoom(2) == View(1.0, 3.0, 4.0)
    assert whole.zoom(2, centre=0.5) == View(0.25, 2.25, 4.0)
    assert whole.zoom(2).pan(0.25) == View(1.5, 3.5, 4.0)
    assert whole.zoom(2).pan(5) == View(2.0, 4.0, 4.0)
    assert whole.zoom(2).start() == View(0.0, 2.0, 4.0)
    assert whole.zoom(2).end() == View(2.0, 4.0, 4.0)
    assert whole.zoom(0.5) == whole  # never wider than the iteration
    assert whole.zoom(1e9).span == pytest.approx(4.0 / 4096)
    assert whole.zoom(2).with_limit(2.5) == View(0.5, 2.5, 2.5)


def test_view_reveal_and_cells():
    view = View(1.0, 3.0, 4.0)
    assert view.reveal(task(F, 1.5, 2.0)) == view
    assert view.reveal(task(F, 0.5, 1.5)) == View(0.5, 2.5, 4.0)
    assert view.reveal(task(F, 3.0, 3.5)) == View(1.5, 3.5, 4.0)
    assert view.reveal(task(F, 0.0, 4.0)) == View(0.0, 2.0, 4.0)  # too long: its start
    assert view.cells(1.5, 2.0, 4) == range(1, 2)
    assert view.cells(1.25, 1.25, 4) == range(1)  # zero-length: the cell it starts in
    assert view.cells(0.0, 9.0, 4) == range(4)
    assert view.cells(3.5, 4.0, 4) == range(4, 4)


def test_ticks():
    assert ticks(0.0, 0.004, 40, gap=10) == [(0, "0"), (10, "1"), (20, "2"), (30, "3")]
    assert ticks(0.00015, 0.00035, 40, gap=10) == [(0, "0.15"), (10, "0.20"), (20, "0.25"),
                                                   (30, "0.30")]
    assert ticks(0.0, 0.0, 40) == []


def test_formats_and_short_names():
    assert format_window(0.0, 0.0002182) == "0.0000–0.2182 ms"
    assert format_window(0.3, 0.33) == "300.00–330.00 ms"
    assert [format_bytes(n) for n in (100, 2048, 3 * 2**20)] == ["100 B", "2.0 KiB", "3.0 MiB"]
    assert short_names(["n0.gpu0", "n0.gpu0->n0.cpu"]) == ["gpu0", "gpu0->cpu"]
    assert short_names(["n0.gpu0", "n1.gpu0"]) == ["n0.gpu0", "n1.gpu0"]


def test_details_without_a_graph():
    details = task_details(tiny_timeline().tasks[1])
    assert details.title == "transfer to b · part 0"
    assert details.rows == [("start", "1000.0000 ms"), ("end", "2000.0000 ms"),
                            ("duration", "1000.0000 ms"), ("ready", "1000.0000 ms"),
                            ("bytes", "1.0 KiB"), ("on", "d0->d1")]


@pytest.fixture(scope="module")
def lenet_model_parallel():
    graph, cluster = model("lenet"), load_named_cluster("p100-4x4", nodes=1)
    strategy = builtin_strategy("model-parallel", graph, cluster)
    return graph, strategy, Simulator(graph, cluster, AnalyticCostModel()).simulate(strategy)


def test_details_give_blocks_and_parameters(lenet_model_parallel):
    graph, strategy, timeline = lenet_model_parallel
    forward = next(t for t in timeline.tasks if t.kind == F and t.op == "conv1")
    rows = dict(task_details(forward, graph, strategy).rows)
    op = graph.op("conv1")
    assert rows["block"] == "×".join(map(str, strategy["conv1"].block_shape(op)))
    assert rows["of"] == "conv1" and rows["dims"] == "sample×channel×height×width"
    assert rows["start"] == f"{forward.start * 1e3:.4f} ms"
    sync = next(t for t in timeline.tasks if t.kind in (S, U))
    assert task_details(sync, graph).title.split()[1] in graph.parameters


def test_a_recomputed_ops_backward_says_it_recomputes(lenet_model_parallel):
    graph, strategy, _ = lenet_model_parallel
    strategy = strategy.replace("conv1", strategy["conv1"].with_recompute(True))
    timeline = Simulator(graph, load_named_cluster("p100-4x4", nodes=1), AnalyticCostModel()) \
        .simulate(strategy)
    said = {(t.op, t.kind): dict(task_details(t, graph, strategy).rows).get("recomputes")
            for t in timeline.tasks if t.kind in (F, B) and t.op in ("conv1", "conv2")}
    assert said[("conv1", B)] and not said[("conv1", F)] and not said[("conv2", B)]


def lenet_sharding_fc1_weight(stage):
    """LeNet data parallel on 4 P100s, fc1's weight at ``stage``, and its timeline."""
    graph = model("lenet")
    cluster = load_named_cluster("p100-4x4", nodes=1)
    strategy = builtin_strategy("data-parallel", graph, cluster).with_shards(
        {"fc1.weight": stage})
    return graph, strategy, Simulator(graph, cluster, AnalyticCostModel()).simulate(strategy)


def test_a_sharded_parameters_sync_says_it_reduce_scatters_and_all_gathers():
    graph, strategy, timeline = lenet_sharding_fc1_weight(ShardStage.GRADIENTS)
    syncs = {t.key: dict(task_details(t, graph, strategy, timeline.bucket_params).rows)
             for t in timeline.tasks if t.kind == TaskKind.SYNC}
    sharded = [rows for rows in syncs.values() if "sharded" in rows]
    # fc1's weight in a bucket of its own (buckets hold one stage), the only one sharded
    assert len(sharded) == 1 and "sums" not in sharded[0]
    assert sharded[0]["sharded"] == "stage 2: each device keeps its part of the optimizer " \
        "state and gradients"
    assert sum("collectives" in rows for rows in syncs.values()) == 1


def test_a_stage_3_parameters_gathers_are_named_and_its_sync_says_reduce_scatter():
    graph, strategy, timeline = lenet_sharding_fc1_weight(ShardStage.PARAMETERS)
    gathers = [task_details(t, graph, strategy) for t in timeline.tasks
               if t.kind == TaskKind.GATHER]
    assert [d.title for d in gathers] == ["gather fc1.weight for fc1's forward · group 0",
                                          "gather fc1.weight for fc1's backward · group 0"]
    assert all(dict(d.rows)["bytes"] == dict(gathers[0].rows)["bytes"] for d in gathers)
    sync = next(dict(task_details(t, graph, strategy).rows) for t in timeline.tasks
                if t.kind == TaskKind.SYNC and "sharded" in dict(task_details(t, graph,
                                                                              strategy).rows))
    assert sync["collectives"].startswith("a reduce-scatter (the parameter is gathered")
    assert KIND_GLYPHS[TaskKind.GATHER] not in {KIND_GLYPHS[k] for k in TaskKind
                                                if k != TaskKind.GATHER}


def test_transfer_blocks_carry_their_bytes(lenet_model_parallel):
    graph, strategy, timeline = lenet_model_parallel
    transfers = [t for t in timeline.tasks if t.kind == T]
    assert transfers
    for t in transfers:
        rows = dict(task_details(t, graph, strategy).rows)
        tensor = next(x for op in graph.ops for x in op.outputs
                      if rows["of"] == f"tensor {x.name}")
        volume = region_volume(tuple((0, int(n)) for n in rows["block"].split("×")))
        assert volume * dtype_bytes(tensor.dtype) == t.nbytes


def test_first_window_is_the_timeline_whole_on_the_longer_scale():
    assert View.first(1.0, 4.0) == View(0.0, 1.0, 4.0)
    assert View.first(4.0, 1.0) == View(0.0, 4.0, 4.0)   # never cut short
    assert View.first(1.0, 4.0).zoom(0.25) == View(0.0, 4.0, 4.0)
