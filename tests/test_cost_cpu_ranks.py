"""A cluster of CPU ranks the simulator can trust: CPU profiles measured with a rank's
threads (the thread count part of their identity), found by the ``cpu-rank`` devices of
``local-cpu-N`` with the loopback calibration, and ``flextui clusters --detect
--cpu-ranks N`` saying what they are measured by."""

from pathlib import Path

import pytest
import torch

from flextui.cli import main
from flextui.cost import profile as profiler
from flextui.cost.cache import ProfileCache, ProfileEntry
from flextui.cost.calibrated import CalibratedCommModel
from flextui.cost.calibration import CommCalibration, save_calibration
from flextui.cost.choose import choose_cost_model
from flextui.cost.cpu_threads import threads_of, with_threads
from flextui.cost.localdevice import cpu_name, resolve_device
from flextui.cost.signatures import Measurement, task_signatures
from flextui.errors import FlextuiError
from flextui.machine import load_named_cluster
from flextui.machine.detect import rank_threads
from flextui.runtime.launch import Torchrun
from helpers import model


@pytest.fixture
def threads(monkeypatch):
    """Set the threads of a launch's rank (OMP_NUM_THREADS; None: unset)."""
    def set_threads(n):
        if n is None:
            monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        else:
            monkeypatch.setenv("OMP_NUM_THREADS", str(n))
    set_threads(None)
    return set_threads


@pytest.mark.parametrize("value, expected", [(None, 1), ("1", 1), ("3", 3)])
def test_a_rank_computes_with_the_threads_a_launch_gives_it(threads, value, expected):
    threads(value)
    assert rank_threads() == expected
    torchrun = Torchrun(Path("plan"), 2, 29500, "run", Path("ranks"))
    assert int(torchrun.environment(1)["OMP_NUM_THREADS"]) == expected


@pytest.mark.parametrize("value", ["0", "two", ""])
def test_threads_that_are_not_a_positive_number_are_one(threads, value):
    threads(value)
    assert rank_threads() == 1


def test_a_cpu_profile_is_named_with_its_threads(threads):
    assert cpu_name(1).endswith(", 1 thread") and cpu_name(4).endswith(", 4 threads")
    assert threads_of(cpu_name(4)) == 4 and threads_of(cpu_name()) == 1
    assert threads_of("cpu: Some CPU") is None                 # measured before thread counts
    assert threads_of("NVIDIA H100 80GB HBM3") is None
    assert threads_of(with_threads("cpu: x", 16)) == 16
    threads(2)
    local = resolve_device("cpu")
    assert local.threads == 2 and threads_of(local.name) == 2
    assert ProfileCache(cpu_name(1), ["."]).path != ProfileCache(cpu_name(2), ["."]).path


def test_profiling_the_cpu_times_with_a_ranks_threads(tmp_path, threads, monkeypatch):
    threads(2)
    seen = []

    def profile_tasks(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return 0
    monkeypatch.setattr(profiler, "profile_tasks", profile_tasks)
    before = torch.get_num_threads()
    run = profiler.prepare_profile(model("lenet", batch_size=4), 2, device="cpu",
                                   profiles=str(tmp_path))
    run.run()
    assert seen == [2] and torch.get_num_threads() == before
    assert run.measurement.device_name == cpu_name(2) and run.cache.device_name == cpu_name(2)


def _profile(directory, device_name, forward_s):
    """A profile of every task of LeNet over 2 devices, each ``forward_s`` forward."""
    graph = model("lenet", batch_size=4)
    measurement = Measurement("float32", True, device_name, torch.__version__)
    cache = ProfileCache(device_name, [directory])
    for signature in task_signatures(graph, measurement, num_devices=2):
        cache.put(signature.key, ProfileEntry(forward_s, 2 * forward_s, repeats=1))
    cache.save()
    return graph


def _loopback(directory):
    save_calibration(CommCalibration(
        device="cpu", backend="gloo", link_kind="loopback", hops=2, world_size=2,
        torch_version=torch.__version__, measured_at="2026-11-23T00:00:00Z",
        p2p=((4096, 1e-4), (2**20, 1e-3)), allreduce=((4096, 2e-4), (2**20, 2e-3))), directory)


def test_cpu_ranks_use_the_profiles_of_their_threads_and_the_loopback_calibration(
        tmp_path, threads):
    _profile(tmp_path, cpu_name(1), 1e-3)
    graph = _profile(tmp_path, cpu_name(2), 5e-3)
    _loopback(tmp_path)
    cluster = load_named_cluster("local-cpu-2")
    op = graph.op("conv1")
    block = (4,) + op.space_shape[1:]
    for n, forward in ((1, 1e-3), (2, 5e-3)):
        threads(n)
        choice = choose_cost_model(graph, cluster, "profiled", profiles=str(tmp_path))
        assert isinstance(choice.model, CalibratedCommModel)
        assert choice.model.base.measurement.device_name == cpu_name(n)
        assert choice.model.op_cost(op, block, cluster.devices[0]).forward_s == forward
        assert choice.model.transfer_s(2**20, cluster.links[0]) == pytest.approx(1e-3 / 2)
    threads(3)
    with pytest.raises(FlextuiError, match="cpu-rank .measured with 3 threads, as a launch's "
                                           "rank computes"):
        choose_cost_model(graph, cluster, "profiled", profiles=str(tmp_path))


def test_cpu_profiles_without_a_thread_count_are_not_used(tmp_path, threads):
    graph = _profile(tmp_path, "cpu: Some CPU", 1e-3)
    with pytest.raises(FlextuiError, match="holds cpu: Some CPU"):
        choose_cost_model(graph, load_named_cluster("local-cpu-2"), "profiled",
                          profiles=str(tmp_path))


def test_clusters_detect_cpu_ranks_says_what_measures_them(tmp_path, threads, capsys):
    assert main(["clusters", "--detect", "--cpu-ranks", "2", "--profiles", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "local-cpu-2: 2 CPU processes of this machine, 1 thread each" in out
    assert "task times: estimated" in out and "flextui profile --device cpu" in out
    assert "loopback: estimated; calibrate it: flextui profile --comm --device cpu" in out
    _profile(tmp_path, cpu_name(1), 1e-3)
    _loopback(tmp_path)
    assert main(["clusters", "--detect", "--cpu-ranks", "2", "--profiles", str(tmp_path),
                 "--json"]) == 0
    import json
    found = json.loads(capsys.readouterr().out)
    assert found["cluster"]["name"] == "local-cpu-2"
    [profile] = found["measured"]["profiles"]
    assert profile["device"] == cpu_name(1) and profile["tasks"] > 0
    [calibration] = found["measured"]["calibrations"]
    assert calibration["link_kind"] == "loopback" and calibration["backend"] == "gloo"
    threads(2)   # measured with one thread: not what two-thread ranks run as
    assert main(["clusters", "--detect", "--cpu-ranks", "2", "--profiles", str(tmp_path)]) == 0
    assert "task times: estimated" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--cpu-ranks", "2"], ["--detect", "--cpu-ranks", "0"],
                                  ["--detect", "--profiles", "x"]])
def test_clusters_cpu_ranks_refusals_are_one_line(argv, capsys):
    assert main(["clusters", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flextui: error: ") and err.count("\n") == 1
