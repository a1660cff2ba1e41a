"""Fixtures shared by the test modules. The plain helpers (models, clusters, waiting in
the app...) are in helpers.py: import them from there, never from this file."""

from pathlib import Path

import pytest

from flextui.graph.library import model_names
from flextui.machine import cluster_names, detect
from helpers import cluster, lenet_node, model

#: the CPU whose estimated peak every test's CPU devices have, whatever machine runs them
#: (an x86 core with AVX2 and FMA: 32 FLOP a cycle)
CPUINFO = Path(__file__).parent / "fake_hosts" / "cpuinfo"


@pytest.fixture(autouse=True)
def cpu_only_unless_marked_gpu(request, monkeypatch):
    """The suite is of CPU runs on any machine: on one with a GPU, a launch would run NCCL
    ranks over its GPUs and a profile would time on cuda:0, so every test but those
    marked ``gpu`` sees none (in this process, and in the processes it starts)."""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        monkeypatch.setattr("torch.cuda.is_available", lambda: False)


@pytest.fixture(autouse=True)
def a_profile_directory_of_its_own(tmp_path_factory, monkeypatch):
    """Every test reads and writes profiles in an empty directory of its own, never the
    user's cache: a launch uses the profiles it finds there by default (``--cost
    auto``), so the developer's own profiles would change what tests simulate."""
    monkeypatch.setenv("FLEXTUI_PROFILES", str(tmp_path_factory.mktemp("profiles")))


@pytest.fixture(autouse=True)
def the_same_cpu_everywhere(monkeypatch):
    """Simulated times on CPU devices (a snapshot's, a hand-computed timeline's) are the
    same on any machine: this process reads the flags of ``CPUINFO``, not the host's."""
    monkeypatch.setattr(detect, "CPUINFO", str(CPUINFO))
    detect.cpu_flop_per_cycle.cache_clear()
    yield
    detect.cpu_flop_per_cycle.cache_clear()


@pytest.fixture(params=model_names())
def any_model(request):
    return model(request.param)


@pytest.fixture(params=cluster_names())
def any_cluster(request):
    return cluster(request.param)


@pytest.fixture(scope="session")
def lenet_log(tmp_path_factory):
    """A finished search's log: 2 chains, 300 steps each."""
    from flextui.cost import AnalyticCostModel
    from flextui.search import SearchOptions, run_search

    path = tmp_path_factory.mktemp("logs") / "lenet.ffsearch"
    graph, cluster = lenet_node()
    run_search(graph, cluster, AnalyticCostModel(), SearchOptions(iterations=300, seed=4,
               chains=2, converge=False), log_path=path)
    return path
