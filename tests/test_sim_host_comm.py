"""Clusters whose devices drive their own communication (CPU ranks with no core to
spare): transfers and all-reduces hold the devices at their ends as well as the links,
and delta simulation stays exactly full simulation."""

import pytest

from flextui.cost import AnalyticCostModel
from flextui.errors import ClusterError
from flextui.machine import Cluster
from flextui.machine.detect import cpu_ranks
from flextui.sim import Simulator
from flextui.sim.taskgraph import TaskKind
from flextui.strategy import builtin_strategy
from helpers import model
from test_sim_delta import run_proposals


def host_and_not(ranks=4):
    """local-cpu-N with host-driven communication, and the same cluster without."""
    data = cpu_ranks(ranks).to_dict()
    data["host_driven_comm"] = True
    host = Cluster.from_dict(data)
    del data["host_driven_comm"]
    return host, Cluster.from_dict(data)


def test_the_flag_is_kept_in_the_clusters_data_only_when_set():
    host, plain = host_and_not()
    assert host.host_driven_comm and not plain.host_driven_comm
    assert "host_driven_comm" not in plain.to_dict() and host.fingerprint != plain.fingerprint
    assert Cluster.from_dict(host.to_dict()) == host
    assert host.with_memory_limit(2**30).host_driven_comm
    with pytest.raises(ClusterError, match="host_driven_comm must be true or false"):
        Cluster.from_dict({**host.to_dict(), "host_driven_comm": "yes"})


def test_cpu_ranks_that_take_every_core_drive_their_communication(monkeypatch):
    from flextui.machine import detect
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(detect, "usable_cpus", lambda: 4)
    assert cpu_ranks(4).host_driven_comm and not cpu_ranks(2).host_driven_comm
    assert "gloo runs on the ranks own cores" in cpu_ranks(4).description
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert cpu_ranks(2).host_driven_comm and not cpu_ranks(1).host_driven_comm


@pytest.mark.parametrize("strategy", ["data-parallel", "expert", "random"])
def test_communication_holds_the_devices_at_its_ends(strategy):
    host, plain = host_and_not()
    graph = model("lenet", batch_size=8)
    chosen = builtin_strategy(strategy, graph, host)
    timeline = Simulator(graph, host, AnalyticCostModel()).simulate(chosen)
    device = {d.name for d in host.devices}
    ends = {link.name: {link.src, link.dst} & device for link in host.links}
    moving = [t for t in timeline.tasks if t.kind in (TaskKind.TRANSFER, TaskKind.SYNC)]
    assert moving
    for task in moving:
        links = [r for r in task.resources if r not in device]
        assert set(task.resources) - set(links) == set().union(*(ends[n] for n in links))
    for name in device:   # a device runs one task at a time, communication included
        spans = sorted((t.start, t.end) for t in timeline.tasks if name in t.resources)
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(spans, spans[1:]))
    compute = {d.name: sum(t.end - t.start for t in timeline.tasks if t.resources == (d.name,))
               for d in host.devices}
    assert {d.name: d.busy_s for d in timeline.devices} == pytest.approx(compute)
    apart = Simulator(graph, plain, AnalyticCostModel()).simulate(chosen)
    assert timeline.makespan >= apart.makespan
    assert [d.busy_s for d in timeline.devices] == pytest.approx([d.busy_s for d in apart.devices])


@pytest.mark.parametrize("name", ["lenet", "rnnlm", "transformer"])
def test_delta_equals_full_when_communication_holds_devices(name):
    options = {"rnnlm": {"steps": 3}, "transformer": {"layers": 2}}.get(name, {})
    host, _ = host_and_not()
    run_proposals(model(name, **options), host, proposals=60, seed=3)
