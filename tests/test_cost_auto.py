"""``--cost auto``, the launch's default: the profiler's times where it measured the
cluster's devices, else the analytic model, and a line that says which."""

import pytest
import torch

from flextui.cli import main
from flextui.cost import AnalyticCostModel
from flextui.cost.cache import ProfileCache, ProfileEntry
from flextui.cost.choose import choose_cost_model
from flextui.cost.localdevice import cpu_name
from flextui.cost.profiled import ProfiledCostModel
from flextui.cost.signatures import Measurement, task_signatures
from flextui.machine import load_named_cluster
from helpers import model


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def profile_lenet(directory):
    """What `flextui profile` would leave for LeNet (batch 4) on 2 one-thread CPU ranks."""
    measurement = Measurement("float32", True, cpu_name(1), torch.__version__)
    cache = ProfileCache(cpu_name(1), [directory])
    for signature in task_signatures(model("lenet", batch_size=4), measurement, num_devices=2):
        cache.put(signature.key, ProfileEntry(1e-3, 2e-3, repeats=10, measured_at=1.0))
    cache.save()


def test_auto_is_profiled_where_profiles_exist_and_analytic_otherwise(tmp_path):
    graph, cluster = model("lenet", batch_size=4), load_named_cluster("local-cpu-2")
    without = choose_cost_model(graph, cluster, "auto", profiles=str(tmp_path))
    assert isinstance(without.model, AnalyticCostModel)
    assert without.notices == [
        "analytic cost model: no profiles of cpu-rank (measured with 1 thread, as a launch's "
        f"rank computes (OMP_NUM_THREADS)) devices for lenet (fp32, training, torch "
        f"{torch.__version__}) in {tmp_path} or {without.notices[0].split(' or ')[-1]}"]
    profile_lenet(tmp_path)
    found = choose_cost_model(graph, cluster, "auto", profiles=str(tmp_path))
    assert isinstance(found.model, ProfiledCostModel)
    assert found.notices[-1].startswith(f"profiled cost model: measured on {cpu_name(1)}")


def test_a_launch_uses_the_profiles_by_default_and_says_so(tmp_path, capsys):
    argv = ["launch", "-m", "lenet", "-b", "4", "--nproc-per-node", "2", "--dry-run",
            "--profiles", str(tmp_path)]
    assert main(argv) == 0
    assert capsys.readouterr().err.startswith("analytic cost model: no profiles of cpu-rank")
    profile_lenet(tmp_path)
    assert main(argv) == 0
    assert capsys.readouterr().err.startswith(
        f"profiled cost model: measured on {cpu_name(1)} (float32)")
    assert main([*argv, "--cost", "analytic"]) == 0
    assert "cost model" not in capsys.readouterr().err
