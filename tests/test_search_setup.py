"""Turning typed choices into a graph, a cluster and search options (shared by the CLI
and the app's Setup screen), the first-launch default, and the cluster summary."""

import pytest

from flextui.defaults import DEFAULT_CLUSTER, DEFAULT_MODEL
from flextui.errors import ClusterError, FieldError, FlextuiError, ModelError
from flextui.machine import Cluster, Device, DeviceSpec, Link, load_named_cluster
from flextui.machine.library import split_resized
from flextui.machine.summary import NETWORK, cluster_summary, place_endpoints
from flextui.search.options import SearchOptions, parse_beta, search_options
from flextui.session import choices as setup
from flextui.session.choices import (
    FIRST_CLUSTER,
    FIRST_CLUSTER_NODES,
    first_choice,
    load_cluster_choice,
    load_model_choice,
    parse_model_options,
    split_options,
)
from helpers import TEST_SPEC

GPU = DeviceSpec("gpu", 2**34, {"float32": 1e13}, 1e12)


def test_model_options_and_batch_size():
    assert parse_model_options(["hidden=512", " layers = 2"], "32") == \
        {"hidden": "512", "layers": "2", "batch_size": "32"}
    assert parse_model_options([], "") == {} and parse_model_options([], None) == {}
    assert split_options("hidden=512, layers=2  vocab=9") == ["hidden=512", "layers=2", "vocab=9"]


@pytest.mark.parametrize("items, batch, field", [
    (["oops"], None, "option"), (["=3"], None, "option"),
    ([], "0", "batch_size"), ([], "many", "batch_size"), ([], -4, "batch_size")])
def test_bad_model_options_name_their_field(items, batch, field):
    with pytest.raises(FieldError) as info:
        parse_model_options(items, batch)
    assert info.value.field == field


def test_load_model_choice_honours_batch_size_and_options():
    graph = load_model_choice("mlp", "32", "layers=2")
    assert graph.batch_size == 32 and graph.meta["options"]["layers"] == 2
    with pytest.raises(ModelError, match="no option"):
        load_model_choice("mlp", "", "depth=3")
    with pytest.raises(ModelError, match="does not exist"):
        load_model_choice("no/such/model.py")


def test_load_cluster_choice_resizes_and_names_the_nodes_field():
    assert load_cluster_choice("p100-4x4", "1").num_devices == 4
    assert load_cluster_choice("p100-4x4", "").num_devices == 16
    with pytest.raises(FieldError, match="leave nodes blank") as info:
        load_cluster_choice("local", "2")
    assert info.value.field == "nodes"
    with pytest.raises(ClusterError, match="no such cluster file"):
        load_cluster_choice("missing.toml")


def test_a_resized_clusters_name_loads_it_and_the_default_is_one():
    resized = load_named_cluster("p100-4x4", nodes=1)
    assert resized.name == "p100-4x4@1node"
    again = load_named_cluster(resized.name)
    assert again.fingerprint == resized.fingerprint
    assert load_named_cluster("p100-4x4@2nodes").num_devices == 8
    assert split_resized("p100-4x4@2nodes") == ("p100-4x4", 2)
    assert split_resized("dgx-a100") == ("dgx-a100", None)
    with pytest.raises(ClusterError, match="unknown cluster"):
        load_named_cluster("nosuch@1node")
    # the CLI's default and the app's first launch (without GPUs) are the same cluster
    assert load_named_cluster(DEFAULT_CLUSTER).fingerprint == \
        load_cluster_choice(FIRST_CLUSTER, str(FIRST_CLUSTER_NODES)).fingerprint


def test_search_options_from_text_and_from_argparse_values():
    typed = search_options("2m", seed="7", workers="2", beta="0.5", memory="reject",
                           memory_budget="12GiB")
    given = search_options("2m", seed=7, workers=2, beta=0.5, memory="reject",
                           memory_budget="12GiB")
    assert typed == given
    assert (typed.time_limit, typed.iterations, typed.chains, typed.memory_budget) == \
        (120.0, None, 2, 12 * 2**30)
    blank = search_options("5000", beta="", memory_budget="  ", training=False)
    assert (blank.iterations, blank.beta, blank.memory_budget, blank.training) == \
        (5000, None, None, False)
    assert parse_beta("auto") is None and parse_beta(None) is None


@pytest.mark.parametrize("changes, field, flag", [
    ({"budget": "soon"}, "budget", "--budget 'soon': give a number of iterations"),
    ({"workers": "0"}, "workers", "--workers must be at least 1"),
    ({"seed": "x"}, "seed", "--seed 'x': give a whole number"),
    ({"beta": "-1"}, "beta", "--beta '-1': must be a positive number"),
    ({"beta": "hot"}, "beta", "--beta 'hot': give a positive number"),
    ({"memory": "swap"}, "memory", "--memory must be one of penalize, reject, ignore"),
    ({"memory_budget": "12 parsecs"}, "memory_budget", "--memory-budget '12 parsecs'"),
    ({"memory_budget": "0.5"}, "memory_budget", "--memory-budget '0.5' is 0 bytes, less "
                                                "than 1 MiB"),
    ({"memory_budget": "9" * 400 + "GiB"}, "memory_budget", "--memory-budget '9999"),
    ({"memory_budget": "9" * 30 + "GiB"}, "memory_budget", "--memory-budget must be at most"),
    ({"budget": "9" * 5000}, "budget", "--budget must be at most"),
    ({"workers": "100000"}, "workers", "--workers must be at most 256"),
    ({"restart_every": 0}, "restart_every", "--restart-every must be a whole number >= 1"),
    ({"restart_every": -3}, "restart_every", "--restart-every must be a whole number >= 1")])
def test_bad_search_options_name_their_field_and_flag(changes, field, flag):
    with pytest.raises(FieldError) as info:
        search_options(**{"budget": "30s", **changes})
    assert info.value.field == field and info.value.flag_message.startswith(flag)


def test_first_choice_uses_the_machine_only_with_gpus_to_split_over():
    cpu = load_named_cluster("local-cpu")
    one_gpu = Cluster("local", [Device(0, "n0.gpu0", 0, GPU)], [])
    four = load_named_cluster("p100-4x4", nodes=1)
    assert first_choice(cpu) == first_choice(one_gpu) == \
        setup.FirstChoice(DEFAULT_MODEL, "p100-4x4", 1)
    assert first_choice(four) == setup.FirstChoice(DEFAULT_MODEL, "local", None)


def test_first_choice_detects_when_not_given(monkeypatch):
    monkeypatch.setattr("flextui.machine.detect.detect_local",
                        lambda: load_named_cluster("dgx-a100"))
    assert first_choice().cluster == "local"


@pytest.mark.parametrize("name, nodes, intra, inter", [
    ("p100-4x4", 1, 4 * (3 * 20e9 + 12e9), 0.0),   # NVLink to 3 peers + PCIe to the host
    ("p100-4x4", None, 16 * (3 * 20e9 + 12e9), 4 * 12.5e9),  # one EDR port a node
    ("h100-cluster", None, 32 * 450e9, 32 * 50e9),  # a 400 Gb/s rail per GPU
    ("dgx-a100", None, 8 * 300e9, 0.0),
    ("local-cpu", None, 0.0, 0.0)])
def test_cluster_summary_aggregate_bandwidths(name, nodes, intra, inter):
    s = cluster_summary(load_named_cluster(name, nodes=nodes))
    assert s["intra_node_bandwidth"] == pytest.approx(intra)
    assert s["inter_node_bandwidth"] == pytest.approx(inter)
    assert set(s["device_specs"]) == set(s["device_kinds"])


def test_switches_are_placed_in_their_node_or_the_network():
    placed = place_endpoints(load_named_cluster("p100-4x4"))
    assert placed["n2.cpu"] == placed["n2.nic"] == 2 and placed["net"] == NETWORK
    devices = [Device(i, f"d{i}", i, TEST_SPEC) for i in range(2)]
    links = [Link(0, "d0->sw", "x", "d0", "sw", 1e9, 0), Link(1, "sw->d1", "x", "sw", "d1", 1e9, 0)]
    s = cluster_summary(Cluster("pair", devices, links, switches=["sw"]))
    assert (s["intra_node_bandwidth"], s["inter_node_bandwidth"]) == (0.0, 1e9)


@pytest.mark.parametrize("stored, message", [
    ({"chains": 0}, "options.chains: must be a whole number >= 1, found 0"),
    ({"chains": "4"}, "options.chains: must be a whole number >= 1, found '4'"),
    ({"beta": "hot"}, "options.beta: must be a number, found 'hot'"),
    ({"beta": -1.0}, "options.beta: must be a positive, finite number"),
    ({"memory_budget": "12GiB"}, "options.memory_budget: must be a whole number >= 1048576, "
                                 "found '12GiB'"),
    ({"memory_budget": 1000}, "options.memory_budget: must be a whole number >= 1048576"),
    ({"restart_every": 0}, "options.restart_every: must be a whole number >= 1"),
    ({"time_limit": -5}, "options.time_limit: must be a positive, finite number"),
    ({"tied": 2}, "options.tied: must be a number <= 1, found 2.0"),
    ({"converge": 1}, "options.converge: must be true or false"),
    ({"memory": "swap"}, "options.memory: must be one of penalize, reject, ignore"),
    ({"init": 3}, "options.init: must be a string, found 3"),
    ({"shiny": True}, "unknown search options ['shiny']"),
])
def test_stored_options_are_checked_by_the_same_rules(stored, message):
    """A search log's options (SearchOptions.from_dict) meet the rules the CLI and the
    Setup form parse with: one FlextuiError naming the field, never a TypeError later."""
    with pytest.raises(FlextuiError) as info:
        SearchOptions.from_dict({**SearchOptions().to_dict(), **stored}, "run.ffsearch")
    assert str(info.value).startswith("run.ffsearch: ") and message in str(info.value)
    assert SearchOptions.from_dict(SearchOptions(chains=2).to_dict(), "x").chains == 2
