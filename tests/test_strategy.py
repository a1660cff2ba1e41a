"""Parallel configs, the valid-config space, built-in strategies and strategy files."""

import json
import random

import pytest

from flextui.cost import AnalyticCostModel
from flextui.errors import FlextuiError, StrategyError
from flextui.graph import region_volume
from flextui.sim import Simulator
from flextui.strategy import (
    BUILTIN_STRATEGIES,
    ParallelConfig,
    builtin_strategy,
    count_configs,
    load_strategy,
    random_config,
    save_strategy,
    strategy_to_json,
    valid_configs,
)
from helpers import cluster, model


@pytest.mark.parametrize("name", BUILTIN_STRATEGIES)
def test_every_builtin_strategy_fits_every_model_and_cluster(name, any_model, any_cluster):
    strategy = builtin_strategy(name, any_model, any_cluster)
    strategy.check(any_model, any_cluster.num_devices)
    assert set(strategy) == {op.name for op in any_model.ops}


def test_task_blocks_tile_the_space_exactly():
    op = model("alexnet").op("conv1") if "conv1" in model("alexnet") else \
        next(o for o in model("alexnet").ops if o.type == "conv2d")
    config = ParallelConfig((2, 4, 1, 1), tuple(range(8)))
    config.check(op, 8)
    regions = config.regions(op)
    assert sum(region_volume(r) for r in regions) == region_volume(tuple((0, s) for s in op.space_shape))
    assert len(set(regions)) == 8
    assert config.task_index(5) == (1, 1, 0, 0)


def test_enumeration_yields_only_valid_configs_and_counts_them():
    graph = model("lenet")
    for op in graph.ops:
        configs = list(valid_configs(op, 4))
        assert len(configs) == count_configs(op, 4) == len(set(configs))
        for c in configs:
            c.check(op, 4)
            assert c.devices == tuple(range(c.devices[0], c.devices[0] + c.num_tasks))
    rng = random.Random(1)
    for op in model("inception_v3").ops:
        random_config(op, 16, rng).check(op, 16)


def _simulated(graph, where, name):
    return Simulator(graph, where, AnalyticCostModel()).simulate(
        builtin_strategy(name, graph, where)).makespan


def test_one_weird_trick_on_several_nodes():
    """Krizhevsky's "one weird trick" (conv layers data parallel, dense layers model
    parallel over his K workers, one machine's GPUs): on 4 nodes of 4 P100s the dense
    layers split their channels over a node's GPUs, the same on every node, and at 64
    images a GPU (where the gradients of AlexNet's 58 million dense weights are not hidden
    behind backward) it beats data parallelism, as his paper says it does."""
    graph, p100 = model("alexnet", batch_size=64 * 16), cluster("p100-4x4")
    dp = builtin_strategy("data-parallel", graph, p100)
    assert all(c.degrees[0] == 16 and c.num_tasks == 16 for c in dp.values())
    ex = builtin_strategy("expert", graph, p100)
    conv = [op for op in graph.ops if op.type == "conv2d"]
    assert all(ex[op.name] == dp[op.name] for op in conv)    # data-parallel convolutions
    for op in graph.ops:
        if op.type == "linear":   # a node's 4 GPUs share each dense layer, 4 replicas
            assert ex[op.name] == ParallelConfig((4, 4), tuple(range(16)))
    assert _simulated(graph, p100, "expert") < _simulated(graph, p100, "data-parallel")


def test_one_weird_trick_on_one_node_is_krizhevskys():
    graph, node = model("alexnet"), cluster("dgx-a100")
    ex = builtin_strategy("expert", graph, node)
    fc = [op for op in graph.ops if op.type == "linear"]
    # the 4096 wide dense layers over the node's 8 GPUs, the 1000-class one too
    assert [ex[op.name] for op in fc] == [ParallelConfig((1, 8), tuple(range(8)))] * 3


def test_gnmt_replicates_on_every_node_a_layer_per_gpu():
    """Wu et al.'s placement, as FlexFlow's section 8.1 describes it: the graph
    replicated on every node, recurrent layer i on GPU i of each node (its embedding
    with it), the output layers data parallel. On 16 nodes of 4 K80s at the paper's
    4,096 samples, NMT's expert strategy is slower than data parallelism by less than
    half, as FlexFlow's Figure 7a has it (expert worse than data parallel); placing
    each layer on one GPU for the whole cluster made it ten times slower."""
    graph, k80 = model("nmt", batch_size=64 * 64), cluster("k80-16x4")
    ex = builtin_strategy("expert", graph, k80)
    layers = list(dict.fromkeys(op.layer for op in graph.ops if op.type == "lstm_cell"))
    assert len(layers) == 4
    for op in graph.ops:
        if op.type == "lstm_cell":
            local = layers.index(op.layer)
            assert ex[op.name] == ParallelConfig(
                (16,) + (1,) * (len(op.space) - 1), tuple(4 * node + local for node in range(16)))
        elif op.type == "embedding":
            assert ex[op.name].degrees[0] == 16 and len(set(ex[op.name].devices)) == 16
            assert len({d % 4 for d in ex[op.name].devices}) == 1
        elif op.type in ("linear", "softmax_ce", "attention"):
            assert ex[op.name].degrees[0] == 64
    dp_s, expert_s = _simulated(graph, k80, "data-parallel"), _simulated(graph, k80, "expert")
    assert dp_s < expert_s < 1.5 * dp_s


def test_gnmt_on_one_node_puts_each_layer_on_its_own_gpu():
    graph = model("rnnlm")
    strategy = builtin_strategy("expert", graph, cluster("dgx-a100"))
    by_layer = {}
    for op in graph.ops:
        if op.type == "lstm_cell":
            by_layer.setdefault(op.layer, set()).update(strategy[op.name].devices)
    assert [len(d) for d in by_layer.values()] == [1] * len(by_layer)
    assert len(set().union(*by_layer.values())) == len(by_layer)


@pytest.mark.parametrize("name", BUILTIN_STRATEGIES)
def test_export_import_round_trips_exactly(tmp_path, name, any_model):
    graph, dgx = any_model, cluster("dgx-a100")
    strategy = builtin_strategy(name, graph, dgx)
    path = tmp_path / "s.json"
    save_strategy(path, strategy, graph, dgx)
    loaded = load_strategy(path, graph, dgx)
    assert loaded == strategy and loaded.name == strategy.name
    assert strategy_to_json(loaded, graph, dgx) == json.loads(path.read_text())


def _write(tmp_path, data):
    path = tmp_path / "bad.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["ops"].update({"no_such_op": d["ops"]["fc1"]}), "ops.no_such_op: graph 'lenet' has no op"),
    (lambda d: d["ops"]["fc1"].update(degrees={"sample": 3}, devices=[0, 1, 2]),
     "degree 3 does not divide dim 'sample'"),
    (lambda d: d["ops"]["fc1"].update(devices=[0, 1, 2, 16]), "device 16 out of range"),
    (lambda d: d["ops"]["fc1"].update(degrees={"height": 2}), "has no dim 'height'"),
    (lambda d: d["ops"].pop("fc1"), "no config for 1 ops"),
    (lambda d: d.update(format="something-else"), "is not a flextui strategy file"),
    (lambda d: d.update(version=99), r"newer flextui \(strategy format version 99; "),
    (lambda d: d["ops"]["fc1"].update(devices="0-3"), "ops.fc1.devices: expected a list"),
    (lambda d: d["ops"]["fc1"].update(devices=[0.5]), "ops.fc1.devices: expected a whole"),
    (lambda d: d.update(name=["best"]), "name: expected a string"),
    # what a file says it was made for is checked, and a typo is not ignored
    *[(lambda d, v=v: d.update(devices=v), "devices: expected a whole number >= 1")
      for v in (0, -1, float("nan"), float("inf"), 2.5, "16")],
    (lambda d: d.update(graph=None), "graph: expected a non-empty string, found None"),
    (lambda d: d.update(graph="0123"), "graph: expected the fingerprint"),
    (lambda d: d.update(devcies=16), "unknown key 'devcies'; did you mean 'devices'"),
    (lambda d: d["ops"]["fc1"].update(degree={"sample": 2}),
     "ops.fc1.degree: unknown key 'degree'; did you mean 'degrees'"),
    (lambda d: d["ops"]["fc1"]["degrees"].update(sample=0), "degrees.sample: expected a whole"),
    (lambda d: d["ops"]["fc1"].pop("devices"), "missing required field 'ops.fc1.devices'"),
])
def test_bad_strategy_files_name_file_and_field(tmp_path, edit, message):
    graph, p100 = model("lenet"), cluster("p100-4x4")
    data = strategy_to_json(builtin_strategy("data-parallel", graph, cluster("dgx-a100")), graph, p100)
    data["ops"]["fc1"] = {"degrees": {"sample": 4}, "devices": [0, 1, 2, 3]}
    edit(data)
    path = _write(tmp_path, data)
    with pytest.raises(StrategyError, match=message) as err:
        load_strategy(path, graph, p100)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("text, message", [
    ("[" * 5000 + "]" * 5000, "nested deeper than flextui's limit of 32"),
    ("[" * 40 + "]" * 40, "nested deeper than flextui's limit of 32"),
    ('{"format": "flextui-strategy", "version": ' + "9" * 5000 + "}", "(5,000 digits)"),
    (json.dumps({"format": "flextui-strategy", "version": 1, "ops": {}, "name": "x" * 10**7}),
     "10,000,000 characters in a name is over flextui's limit of 256"),
], ids=["nested", "nested-40", "huge-integer", "huge-name"])
def test_strategy_files_past_the_limits_are_one_clear_error(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(FlextuiError) as info:
        load_strategy(path, model("lenet"), cluster("p100-4x4"))
    assert str(info.value).startswith(str(path)) and message in str(info.value)
    assert len(str(info.value)) < 500


def test_strategy_file_that_is_not_json(tmp_path):
    path = _write(tmp_path, "{not json")
    with pytest.raises(StrategyError, match=r"bad.json is not valid JSON: .* line 1"):
        load_strategy(path, model("lenet"), cluster("p100-4x4"))
    with pytest.raises(StrategyError, match="does not exist"):
        load_strategy(tmp_path / "missing.json", model("lenet"), cluster("p100-4x4"))


def test_regions_are_every_task_region_in_task_order():
    rng = random.Random(2)
    for op in model("inception_v3").ops:
        config = random_config(op, 16, rng)
        assert config.regions(op) == [config.task_region(op, k) for k in range(config.num_tasks)]
