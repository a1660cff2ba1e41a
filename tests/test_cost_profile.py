"""Profiling tasks with the block kernels, and the profiled cost model built on them."""

import itertools
import json
import zlib

import msgpack
import pytest
import torch

from flextui.cli import main
from flextui.cost import AnalyticCostModel, cost_model_from_identity, profile as profiler
from flextui.cost.cache import PROFILES, ProfileCache, ProfileEntry
from flextui.cost.calibrated import CalibratedCommModel
from flextui.cost.calibration import CommCalibration, read_calibrations, save_calibration
from flextui.cost.choose import choose_cost_model
from flextui.cost.clocks import CpuClock, Stopped
from flextui.cost.localdevice import cpu_name, resolve_device
from flextui.cost.profile import profile_tasks, time_task
from flextui.cost.profiled import ProfiledCostModel
from flextui.cost.signatures import Measurement, block_shapes, task_signatures
from flextui.cost.update import time_update
from flextui.errors import FlextuiError
from flextui.machine import DeviceSpec
from flextui.sim import Simulator
from flextui.strategy import builtin_strategy
from helpers import line_cluster, model

CPU = DeviceSpec("cpu", 2**34, {"float32": 1e11}, 2e10)


@pytest.fixture(autouse=True)
def one_thread():
    """Time on one thread: on a busy small machine torch's thread pool makes timings of
    tiny kernels erratic."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def measurement(training=True):
    return Measurement("float32", training, cpu_name(), torch.__version__)


def lenet():
    return model("lenet", batch_size=4)


def test_signatures_are_the_distinct_blocks_of_every_config():
    graph = lenet()
    signatures = task_signatures(graph, measurement(), num_devices=4)
    keys = [s.key.encoded for s in signatures]
    assert len(keys) == len(set(keys))
    # making the batch is a task too: every block of the image and the labels
    for name in ("images", "labels"):
        op = graph.op(name)
        assert {s.block for s in signatures if s.op is op} == set(block_shapes(op, 4))
    conv = graph.op("conv1")
    assert {s.block for s in signatures if s.op is conv} == set(block_shapes(conv, 4))
    # one strategy's tasks: one block per op, a subset of the search's
    data_parallel = builtin_strategy("data-parallel", graph, line_cluster(4))
    mine = task_signatures(graph, measurement(), strategies=[data_parallel])
    assert {s.block for s in mine if s.op is conv} == {(1,) + conv.space_shape[1:]}
    assert {s.key.encoded for s in mine} <= set(keys)


def test_a_task_is_timed_forward_and_backward():
    [signature] = [s for s in task_signatures(lenet(), measurement(), num_devices=1)
                   if s.op.name == "conv1"]
    entry = time_task(signature, torch.device("cpu"), warmup=1, repeats=3)
    assert not entry.oom and entry.repeats == 3
    assert 0 < entry.forward_s < 1 and 0 < entry.backward_s < 1
    assert entry.forward_spread_s >= 0 and entry.peak_memory_bytes > 0
    [inference] = [s for s in task_signatures(lenet(), measurement(False), num_devices=1)
                   if s.op.name == "conv1"]
    assert time_task(inference, torch.device("cpu"), warmup=0, repeats=2).backward_s is None


def test_out_of_memory_is_recorded_not_raised(monkeypatch):
    def exhausted(*args):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
    monkeypatch.setattr(profiler, "_time_task", exhausted)
    signature = task_signatures(lenet(), measurement(), num_devices=1)[0]
    entry = time_task(signature, torch.device("cpu"))
    assert entry.oom and entry.forward_s is None


def test_profiling_skips_what_the_cache_has_and_saves(tmp_path):
    signatures = task_signatures(lenet(), measurement(), num_devices=2)
    cache = ProfileCache(cpu_name(), [tmp_path])
    events = []
    assert profile_tasks(signatures, cache, torch.device("cpu"), warmup=0, repeats=2,
                         on_event=events.append) == len(signatures)
    assert [e.done for e in events] == list(range(1, len(signatures) + 1))
    assert not any(e.cached for e in events)
    again = ProfileCache(cpu_name(), [tmp_path])          # a new process would see the file
    events.clear()
    assert profile_tasks(signatures, again, torch.device("cpu"), on_event=events.append) == 0
    assert all(e.cached for e in events) and again.hits == len(signatures)


def test_profiling_stops_when_asked_and_keeps_what_it_measured(tmp_path):
    signatures = task_signatures(lenet(), measurement(), num_devices=2)
    cache = ProfileCache(cpu_name(), [tmp_path])
    seen = []
    measured = profile_tasks(signatures, cache, torch.device("cpu"), warmup=0, repeats=1,
                             on_event=seen.append, stop=lambda: len(seen) >= 3)
    assert measured == 3
    assert profile_tasks(signatures[:3], ProfileCache(cpu_name(), [tmp_path]),
                         torch.device("cpu")) == 0


def test_a_stop_ends_a_task_of_a_million_repeats_at_its_next_sample(tmp_path, monkeypatch):
    """Ctrl-C during `profile --repeats 1000000`: the task in hand stops at its next
    sample, unmeasured (stop was asked between tasks only, so one task ran to its end),
    and so does an optimizer update's timing."""
    signatures = task_signatures(lenet(), measurement(), num_devices=2)
    cache = ProfileCache(cpu_name(), [tmp_path])
    samples, real = [], CpuClock.time

    def counted(clock, run, runs):
        samples.append(runs)
        assert len(samples) < 1000, "the stop was not asked between samples"
        return real(clock, run, runs)
    monkeypatch.setattr(CpuClock, "time", counted)
    asked = itertools.count()
    stop = lambda: next(asked) >= 10  # noqa: E731
    assert profile_tasks(signatures, cache, torch.device("cpu"), warmup=0, repeats=10**6,
                         stop=stop) == 0
    assert len(samples) < 50 and cache.get(signatures[0].key) is None  # not a million
    with pytest.raises(Stopped):
        time_update(4096, torch.float32, torch.device("cpu"), warmup=0, repeats=10**6,
                    stop=lambda: next(asked) >= 20)


def hand_model(graph, times_by_op: dict[str, tuple[float, float]]):
    """A profiled model whose every block of the named ops took the given times."""
    m = measurement()
    times = {s.key.encoded: times_by_op[s.op.name]
             for s in task_signatures(graph, m, num_devices=2) if s.op.name in times_by_op}
    return ProfiledCostModel(m, times, AnalyticCostModel())


def test_measured_times_where_present_analytic_elsewhere():
    graph = lenet()
    profiled = hand_model(graph, {"conv1": (0.004, 0.009)})
    analytic = AnalyticCostModel()
    cpu, gpu = line_cluster(2, spec=CPU).device(0), line_cluster(2).device(0)
    conv1, fc1 = graph.op("conv1"), graph.op("fc1")
    block = conv1.space_shape
    cost = profiled.op_cost(conv1, block, cpu)
    assert (cost.forward_s, cost.backward_s) == (0.004, 0.009)
    assert profiled.op_cost(conv1, block, gpu) == analytic.op_cost(conv1, block, gpu)
    assert profiled.fallbacks == 0
    assert profiled.op_cost(fc1, fc1.space_shape, cpu) == analytic.op_cost(fc1, fc1.space_shape, cpu)
    assert profiled.fallbacks == 1


def test_a_simulation_uses_the_measured_times_exactly():
    graph = lenet()
    inputs = [op.name for op in graph.ops if op.type == "input"]
    names = [op.name for op in graph.ops if op.type != "input"]
    profiled = hand_model(graph, {**dict.fromkeys(names, (0.001, 0.002)),
                                  **dict.fromkeys(inputs, (0.0005, 0.0))})
    cluster = line_cluster(1, spec=CPU)
    timeline = Simulator(graph, cluster, profiled, memory="ignore").simulate(
        builtin_strategy("data-parallel", graph, cluster))
    # one device, no transfers: making the batch, every op forward then backward, one
    # after another, then the updates (the base model's)
    compute = [t for t in timeline.tasks if t.kind.name in ("FORWARD", "BACKWARD")]
    assert sum(t.end - t.start for t in compute) == pytest.approx(
        len(inputs) * 0.0005 + len(names) * 0.003)
    assert profiled.fallbacks == 0


def test_an_input_task_is_timed_making_its_block_of_the_batch():
    """The profiler times a graph input as a launch on synthetic data runs it: making its
    block from the seed (floats or integer labels), with no backward pass."""
    graph = lenet()
    signatures = task_signatures(graph, measurement(), num_devices=1)
    # the block made: 4 images of 28 x 28 in float32; 4 labels in int64
    for name, nbytes in (("images", 4 * 28 * 28 * 4), ("labels", 4 * 8)):
        [signature] = [s for s in signatures if s.op.name == name]
        entry = time_task(signature, torch.device("cpu"), warmup=1, repeats=3)
        assert not entry.oom and entry.repeats == 3
        assert 0 < entry.forward_s < 1 and entry.backward_s == 0.0
        assert entry.peak_memory_bytes == nbytes
    [inference] = [s for s in task_signatures(graph, measurement(False), num_devices=1)
                   if s.op.name == "images"]
    assert time_task(inference, torch.device("cpu"), warmup=0, repeats=2).backward_s is None


def test_the_identity_carries_the_times(tmp_path):
    graph = lenet()
    profiled = hand_model(graph, {"conv1": (0.004, 0.009), "fc2": (0.5, 0.25)})
    rebuilt = cost_model_from_identity(profiled.identity)
    assert isinstance(rebuilt, ProfiledCostModel) and rebuilt.times == profiled.times
    assert rebuilt.identity == profiled.identity
    with pytest.raises(FlextuiError, match="damaged"):
        cost_model_from_identity(profiled.identity[:-40] + "x" * 40)


def test_choosing_profiled_without_profiles_says_how_to_make_them(tmp_path):
    with pytest.raises(FlextuiError, match="flextui profile"):
        choose_cost_model(lenet(), line_cluster(2, spec=CPU), "profiled", profiles=str(tmp_path))
    with pytest.raises(FlextuiError, match="--cost"):
        choose_cost_model(lenet(), line_cluster(2, spec=CPU), "measured")


def test_choosing_profiled_finds_the_cluster_kinds_profiles(tmp_path):
    graph = lenet()
    signatures = task_signatures(graph, measurement(), num_devices=2)
    cache = ProfileCache(cpu_name(), [tmp_path])
    for s in signatures[:5]:
        cache.put(s.key, ProfileEntry(0.001, 0.002, repeats=1))
    cache.save()
    choice = choose_cost_model(graph, line_cluster(2, spec=CPU), "profiled", profiles=str(tmp_path))
    assert isinstance(choice.model, ProfiledCostModel)
    assert len(choice.model.times) == 5 and choice.model.wanted == len(signatures)
    assert "5 of the" in choice.notices[-1]
    with pytest.raises(FlextuiError, match="no profiles of test devices"):
        choose_cost_model(graph, line_cluster(2), "profiled", profiles=str(tmp_path))


def _cpu_cache_bytes(tmp_path) -> bytes:
    """A valid profile cache of this CPU holding LeNet's first tasks."""
    cache = ProfileCache(cpu_name(), [tmp_path / "made"])
    for s in task_signatures(lenet(), measurement(), num_devices=2)[:5]:
        cache.put(s.key, ProfileEntry(0.001, 0.002, repeats=1))
    cache.save()
    return cache.path.read_bytes()


def _newer(data: bytes) -> bytes:
    doc = {k: v for k, v in msgpack.unpackb(data).items() if k != "checksum"}
    doc["version"] = PROFILES.version + 1
    return msgpack.packb({**doc, "checksum": zlib.crc32(msgpack.packb(doc, use_bin_type=True))},
                         use_bin_type=True)


@pytest.mark.parametrize("damage, phrase, moved", [
    (lambda data: data[:-40], "truncated", True),
    (lambda data: data[:200] + bytes([data[200] ^ 4]) + data[201:], "corrupt", True),
    (_newer, "newer flextui", False),
])
def test_an_unusable_profile_cache_is_named_and_moved_aside(tmp_path, damage, phrase, moved):
    """`--cost profiled` with a damaged cache in --profiles DIR names the file and what is
    wrong with it, and moves a corrupt one aside as `flextui profile` does (a newer one
    is left alone), instead of only saying there are no profiles in DIR."""
    data = damage(_cpu_cache_bytes(tmp_path))
    path = tmp_path / "profiles" / ProfileCache(cpu_name(), [tmp_path]).path.name
    path.parent.mkdir()
    path.write_bytes(data)
    with pytest.raises(FlextuiError) as info:
        choose_cost_model(lenet(), line_cluster(2, spec=CPU), "profiled",
                          profiles=str(path.parent))
    message = str(info.value)
    assert f"{path}: " in message and phrase in message and "\n" not in message
    assert path.exists() != moved
    assert (f"moved aside to {path}.corrupt-" in message) == moved


def test_a_profile_cache_of_another_device_is_named(tmp_path):
    data = _cpu_cache_bytes(tmp_path)
    directory = tmp_path / "profiles"
    directory.mkdir()
    (directory / "nvidia-h100.msgpack").write_bytes(data)   # this CPU's, misnamed
    with pytest.raises(FlextuiError) as info:
        choose_cost_model(lenet(), line_cluster(2), "profiled", profiles=str(directory))
    assert "nvidia-h100.msgpack: holds profiles for device kind" in str(info.value)
    assert list(directory.glob("nvidia-h100.msgpack.corrupt-*"))
    ProfileCache(cpu_name(), [directory]).path.write_bytes(data)
    with pytest.raises(FlextuiError) as info:   # a good cache, of a kind not simulated
        choose_cost_model(lenet(), line_cluster(2), "profiled", profiles=str(directory))
    assert f"holds {cpu_name()}" in str(info.value)


def test_profiling_refuses_a_newer_cache_before_any_work(tmp_path, monkeypatch):
    path = ProfileCache(cpu_name(), [tmp_path]).path
    path.write_bytes(_newer(_cpu_cache_bytes(tmp_path)))

    def collect(*args, **kwargs):
        raise AssertionError("tasks collected for a cache that cannot be saved")
    monkeypatch.setattr(profiler, "task_signatures", collect)
    with pytest.raises(FlextuiError, match=f"{path}: written by a newer flextui"):
        profiler.prepare_profile(lenet(), 2, device="cpu", profiles=str(tmp_path))


def test_profiled_includes_the_kinds_communication_calibration(tmp_path):
    graph = lenet()
    [signature] = task_signatures(graph, measurement(), num_devices=1)[:1]
    cache = ProfileCache(cpu_name(), [tmp_path])
    cache.put(signature.key, ProfileEntry(0.001, 0.002, repeats=1))
    cache.save()
    measured = CommCalibration(device="cpu", backend="gloo", link_kind="test", hops=1,
                               world_size=2, torch_version=torch.__version__,
                               measured_at="2026-11-23T00:00:00Z",
                               p2p=((4096, 1e-4), (2**20, 1e-3)),
                               allreduce=((4096, 2e-4), (2**20, 2e-3)))
    save_calibration(measured, tmp_path)
    cluster = line_cluster(2, spec=CPU)
    choice = choose_cost_model(graph, cluster, "profiled", profiles=str(tmp_path))
    assert isinstance(choice.model, CalibratedCommModel)
    assert isinstance(choice.model.base, ProfiledCostModel)
    assert choice.model.transfer_s(2**20, cluster.links[0]) == pytest.approx(1e-3)
    assert "calibrated over test" in choice.notices[-1]
    rebuilt = cost_model_from_identity(choice.model.identity)
    assert rebuilt.identity == choice.model.identity


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")   # as the gloo tests in test_cost_comm.py
def test_cli_calibrates_communication_between_two_cpu_processes(tmp_path, capsys):
    code, out, _ = run(capsys, "profile", "--comm", "--device", "cpu", "--repeats", "2",
                       "--profiles", str(tmp_path), "--json")
    [data] = json.loads(out)    # a calibration per link kind: CPU ranks have one
    assert code == 0 and data["backend"] == "gloo" and data["world_size"] == 2
    assert [c.link_kind for c in read_calibrations(data["file"])] == ["loopback"]


def test_a_device_that_does_not_exist_is_a_clear_error():
    with pytest.raises(FlextuiError, match="--device cpu"):
        resolve_device("cuda:3")
    with pytest.raises(FlextuiError, match="write cuda:N"):
        resolve_device("tpu0")
    fallback = resolve_device(None)
    assert fallback.device.type == "cpu" and "CPU" in fallback.notice


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_profiles_then_hits_the_cache(tmp_path, capsys):
    args = ["profile", "-m", "lenet", "-b", "4", "--max-devices", "2", "--device", "cpu",
            "--profiles", str(tmp_path), "--repeats", "2", "--warmup", "0", "--json"]
    code, out, _ = run(capsys, *args)
    cold = json.loads(out)
    assert code == 0 and cold["measured"] == cold["tasks"] > 0 and not cold["interrupted"]
    code, out, _ = run(capsys, *args)
    warm = json.loads(out)
    assert warm["measured"] == 0 and warm["cached"] == cold["tasks"]
    assert {r["op_type"] for r in warm["op_types"]} >= {"conv2d", "linear", "pool2d"}
    code, out, _ = run(capsys, "profile", "--show", cold["cache"])
    assert code == 0 and f"{cold['tasks']} tasks measured" in out
    code, out, _ = run(capsys, "profile", "--show", cold["cache"], "-m", "lenet", "-b", "4",
                       "--max-devices", "2")
    assert "measured vs analytic" in out and "conv2d" in out


def test_cli_merge_combines_two_machines(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    signatures = task_signatures(lenet(), measurement(), num_devices=2)
    for d, part in ((a, signatures[:4]), (b, signatures[4:9])):
        cache = ProfileCache(cpu_name(), [d])
        for s in part:
            cache.put(s.key, ProfileEntry(0.001, 0.002, repeats=1))
        cache.save()
    [fa], [fb] = a.glob("*.msgpack"), b.glob("*.msgpack")
    code, out, _ = run(capsys, "profile", "--merge", str(fa), str(fb),
                       "--profiles", str(tmp_path / "merged"))
    assert code == 0 and "9 tasks" in out


def test_cli_sets_a_corrupt_cache_aside_and_rebuilds_it(tmp_path, capsys):
    args = ["profile", "-m", "lenet", "-b", "4", "--max-devices", "1", "--device", "cpu",
            "--profiles", str(tmp_path), "--repeats", "1", "--warmup", "0"]
    assert run(capsys, *args, "--json")[0] == 0
    [cache] = tmp_path.glob("*.msgpack")
    data = cache.read_bytes()
    cache.write_bytes(data[: len(data) // 2])          # a half-written copy, say
    code, out, _ = run(capsys, *args)
    assert code == 0 and "moved aside" in out and "rebuilt" in out
    [aside] = tmp_path.glob("*.corrupt-*")
    assert aside.read_bytes() == data[: len(data) // 2]   # kept, not deleted
    assert ProfileCache(cpu_name(), [tmp_path]).notices == []


def test_cli_bad_input(tmp_path, capsys):
    bad = tmp_path / "x.msgpack"
    bad.write_bytes(b"\x93\x01\x02")
    code, _, err = run(capsys, "profile", "--show", str(bad))
    assert code == 2 and "x.msgpack" in err and "Traceback" not in err
    code, _, err = run(capsys, "profile", "-m", "lenet", "--device", "cuda:3")
    assert code == 2 and "--device cpu" in err
