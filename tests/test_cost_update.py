"""The optimizer update, measured by the profiler and used by the profiled cost model."""

import json

import pytest
import torch

from flextui.cli import main
from flextui.cost import AnalyticCostModel, cost_model_from_identity
from flextui.cost.cache import ProfileCache, UpdateEntry, UpdateKey, decode_cache
from flextui.cost.localdevice import cpu_name
from flextui.cost.model import analytic_update_s
from flextui.cost.optimizers import OptimizerKind
from flextui.cost.profile import prepare_profile
from flextui.cost.profiled import ProfiledCostModel
from flextui.cost.signatures import Measurement
from flextui.cost.update import cached_updates, update_key, update_sizes
from flextui.machine import load_named_cluster
from flextui.runtime.metrics import TaskRow, Tasks
from flextui.runtime.recording import record_profile
from flextui.sim import Simulator
from flextui.strategy import builtin_strategy
from helpers import model


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def measurement():
    return Measurement("float32", True, cpu_name(1), torch.__version__)


def test_update_sizes_double_up_to_the_largest_parameter():
    graph = model("lenet", batch_size=4)
    largest = max(p.numel for p in graph.parameters.values()) * 4
    sizes = update_sizes(graph, "float32")
    assert sizes[0] == 4096 and all(b == 2 * a for a, b in zip(sizes, sizes[1:]))
    assert sizes[-2] < largest <= sizes[-1]


def test_profiling_times_the_update_and_the_cost_model_uses_it(tmp_path, capsys):
    graph = model("lenet", batch_size=4)
    run = prepare_profile(graph, 2, device="cpu", profiles=str(tmp_path))
    run.run(warmup=0, repeats=1)
    sizes = update_sizes(graph, "float32")
    # every optimizer's update, as a run makes it (cost.update_steps)
    tables = {kind: cached_updates(run.cache, run.measurement, sizes, kind)
              for kind in OptimizerKind}
    for table in tables.values():
        assert [n for n, _ in table] == sizes and all(t > 0 for _, t in table)
    table = tables[OptimizerKind.SGD]
    cluster = load_named_cluster("local-cpu-2")
    profiled = ProfiledCostModel.from_cache(graph, 2, run.cache, run.measurement,
                                            AnalyticCostModel())
    assert profiled.updates == tables
    device = cluster.devices[0]
    assert profiled.update_s(table[1][0], device) == table[1][1]
    adamw = tables[OptimizerKind.ADAMW]
    assert profiled.update_s(adamw[1][0], device, OptimizerKind.ADAMW) == adamw[1][1]
    between = (table[0][0] + table[1][0]) // 2
    assert min(table[0][1], table[1][1]) <= profiled.update_s(between, device) \
        <= max(table[0][1], table[1][1])
    assert "; sgd updates measured" in profiled.describe()
    assert "; adamw updates measured" in profiled.describe()
    # a shown cache lists the updates with the tasks (a table row has no output block)
    assert main(["profile", "--show", str(run.cache.path), "-m", "lenet", "-b", "4",
                 "--max-devices", "2"]) == 0
    capsys.readouterr()
    assert main(["profile", "--show", str(run.cache.path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(u["key"]["shard_bytes"], u["update"]["seconds"]) for u in shown["updates"]
            if u["key"]["optimizer"] == "sgd"] == list(table)
    assert {e["key"]["op_type"] for e in shown["entries"]} <= {op.type for op in graph.ops}


def _model(sgd, adamw=()):
    return ProfiledCostModel(measurement(), {}, AnalyticCostModel(),
                             updates={OptimizerKind.SGD: sgd, OptimizerKind.ADAMW: adamw})


def test_measured_updates_replace_the_roofline_guess_on_the_profiled_kind_only():
    cpu = load_named_cluster("local-cpu-2").devices[0]
    other = load_named_cluster("p100-4x4@1node").devices[0]
    profiled = _model(((4096, 1e-6), (8192, 3e-6)), ((4096, 5e-6), (8192, 9e-6)))
    assert profiled.update_s(8192, cpu) == 3e-6
    assert profiled.update_s(6144, cpu) == pytest.approx(2e-6)
    assert profiled.update_s(8192, cpu, OptimizerKind.ADAMW) == 9e-6
    assert profiled.update_s(8192, other) == analytic_update_s(8192, other)
    assert _model(()).update_s(8192, cpu) == analytic_update_s(8192, cpu)
    # AdamW's roofline: seven passes over the shard (its two moving averages) to SGD's five
    assert _model(()).update_s(8192, cpu, OptimizerKind.ADAMW) == \
        7 * 8192 / cpu.spec.mem_bandwidth
    assert analytic_update_s(8192, cpu) == 5 * 8192 / cpu.spec.mem_bandwidth
    graph = model("mlp", batch_size=8, width=64, in_features=32, layers=1)
    cluster = load_named_cluster("local-cpu-2")
    strategy = builtin_strategy("data-parallel", graph, cluster)
    for optimizer in OptimizerKind:
        simulator = Simulator(graph, cluster, profiled, optimizer=optimizer)
        updates = [t for t in simulator.simulate(strategy).tasks if t.kind.name == "UPDATE"]
        # a device updates the shards of a bucket's parameters in one task: the run's
        # optimizer's times, summed
        shards = simulator.task_graph(strategy).param_shards.values()
        for d, device in enumerate(cluster.devices):
            mine = [t for t in updates if t.resources == (device.name,)]
            assert mine and sum(t.end - t.start for t in mine) == pytest.approx(
                sum(profiled.update_s(n, cpu, optimizer) for s in shards
                    for dev, n in zip(s.devices, s.nbytes) if dev == d))


def test_the_identity_carries_the_updates_and_stays_as_it_was_without():
    profiled = _model(((4096, 1e-6), (8192, 3e-6)), ((4096, 4e-6),))
    rebuilt = cost_model_from_identity(profiled.identity)
    assert rebuilt.updates == profiled.updates and rebuilt.identity == profiled.identity
    assert "updates" not in _model(()).identity
    # an identity from before updates named their optimizer (a search log's) held SGD's
    before = profiled.identity.replace(
        '"optimizer_updates":{"adamw":[[4096,4e-06]],"sgd":[[4096,1e-06],[8192,3e-06]]}',
        '"updates":[[4096,1e-06],[8192,3e-06]]')
    assert before != profiled.identity
    assert cost_model_from_identity(before).updates == \
        {OptimizerKind.SGD: ((4096, 1e-6), (8192, 3e-6))}
    broken = profiled.identity.replace("[8192,3e-06]", "[2048,3e-06]")
    assert broken != profiled.identity
    with pytest.raises(Exception, match="update sizes must increase"):
        cost_model_from_identity(broken)


def test_an_update_is_a_record_of_its_own_under_its_shard(tmp_path):
    key = update_key(measurement(), 8192, OptimizerKind.SGD)
    assert key == UpdateKey(8192, "float32", cpu_name(1), torch.__version__, OptimizerKind.SGD)
    cache = ProfileCache(cpu_name(1), [tmp_path])
    cache.put_update(key, UpdateEntry(1e-5, 1e-7, 10))
    assert cache.save() == 0                     # no task entries
    again = ProfileCache(cpu_name(1), [tmp_path])
    assert cached_updates(again, measurement(), [4096, 8192], OptimizerKind.SGD) == \
        ((8192, 1e-5),)
    assert cached_updates(again, measurement(), [8192], OptimizerKind.ADAMW) == ()
    saved = decode_cache(again.path.read_bytes())
    assert saved.entries == {} and saved.updates == {key: again.get_update(key)}
    with pytest.raises(ValueError, match="does not belong"):
        cache.put_update(UpdateKey(8192, "float32", "NVIDIA H100 80GB HBM3", "2.4.0",
                                   OptimizerKind.SGD),
                         UpdateEntry(1e-5))


def test_recording_a_launchs_task_times_keeps_the_measured_updates(tmp_path):
    graph = model("lenet", batch_size=4)
    cache = ProfileCache(cpu_name(1), [tmp_path])
    cache.put_update(update_key(measurement(), 4096, OptimizerKind.SGD),
                     UpdateEntry(2e-6, measured_at=1.0))
    cache.save()
    conv = graph.op("conv1")
    row = TaskRow(conv.index, tuple(conv.space_shape), 0.007, 0.009, 20)
    [written] = record_profile(graph, [Tasks(0, cpu_name(1), 20, (row,))], str(tmp_path))
    assert written.tasks == 1
    again = ProfileCache(cpu_name(1), [tmp_path])
    assert cached_updates(again, measurement(), [4096], OptimizerKind.SGD) == ((4096, 2e-6),)
    recorded = ProfileCache(cpu_name(1), [tmp_path / "in-run", tmp_path])
    assert cached_updates(recorded, measurement(), [4096], OptimizerKind.SGD) == \
        ((4096, 2e-6),)
    assert recorded.get(measurement().key(conv, tuple(conv.space_shape))).forward_s == \
        pytest.approx(0.007)


def test_an_update_is_timed_with_its_shard_out_of_a_cache_this_large(tmp_path):
    from flextui.cost.update import _cache_size, _evict_bytes
    for text, expected in (("32768K", 32 * 2**20), ("2M", 2 * 2**20), ("512", 512),
                           ("big", 0), ("", 0)):
        (tmp_path / "size").write_text(text + "\n")
        assert _cache_size(tmp_path / "size") == expected
    assert _cache_size(tmp_path / "missing") == 0
    assert 64 * 2**20 <= _evict_bytes(torch.device("cpu")) <= 2**30
