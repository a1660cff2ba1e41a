"""Communication calibration: tables, fits, files, measurement, and the calibrated model."""

import math
import os
import random
import time

import msgpack
import pytest
import torch
import torch.multiprocessing as mp

from fake_cuda import FakeCuda
from flextui.cost import AnalyticCostModel, comm, cost_model_from_identity
from flextui.cost.calibrated import CalibratedCommModel
from flextui.cost.calibration import (
    CommCalibration,
    calibration_path,
    fit_latency_bandwidth,
    interpolate,
    load_calibrations,
    read_calibrations,
    save_calibration,
)
from flextui.cost.clocks import CudaClock
from flextui.cost.model import analytic_update_s
from flextui.cost.ring import ring_allreduce_s
from flextui.errors import FlextuiError
from flextui.machine import detect_local
from flextui.machine.detect import cpu_ranks
from flextui.sim import DeltaSimulator, Simulator, TaskKind
from flextui.strategy import builtin_strategy, random_config
from helpers import HANG_S, cluster, model
from nvtopo_samples import SAMPLES, fake_gpus

TABLE = ((1000, 1.0), (2000, 3.0), (4000, 4.0))


def calibration(link_kind="nvswitch", hops=2, world_size=2, device="A100-SXM4-80GB",
                p2p=((4096, 1e-4), (2**20, 1e-3)),
                allreduce=((4096, 2e-4), (2**20, 2e-3))) -> CommCalibration:
    return CommCalibration(device=device, backend="nccl", link_kind=link_kind, hops=hops,
                           world_size=world_size, torch_version="2.13.0",
                           measured_at="2025-01-01T00:00:00Z", p2p=p2p, allreduce=allreduce)


# -- tables ----------------------------------------------------------------------------


@pytest.mark.parametrize("nbytes, seconds", [
    (10, 1.0), (1000, 1.0),            # below the smallest: its time (latency floor)
    (1500, 2.0), (2000, 3.0), (3000, 3.5), (4000, 4.0),   # linear in between
    (6000, 5.0), (8000, 6.0),          # above: the last segment's 2000 B/s
])
def test_interpolate_between_below_and_above_the_measured_sizes(nbytes, seconds):
    assert interpolate(TABLE, nbytes) == pytest.approx(seconds, rel=1e-12)


def test_extrapolation_uses_average_bandwidth_when_the_last_segment_does_not_rise():
    assert interpolate(((1000, 1.0), (2000, 1.0)), 4000) == pytest.approx(2.0)
    assert interpolate(((1000, 2.0),), 500) == 2.0
    assert interpolate(((1000, 2.0),), 3000) == pytest.approx(6.0)


def test_fit_recovers_an_exact_latency_bandwidth_line():
    table = tuple((n, 1e-5 + n / 1e9) for n in (4096, 65536, 2**20, 2**24))
    latency, bandwidth = fit_latency_bandwidth(table)
    assert latency == pytest.approx(1e-5, rel=1e-9)
    assert bandwidth == pytest.approx(1e9, rel=1e-9)


def test_fit_edge_cases():
    assert fit_latency_bandwidth(((1000, 2.0),)) == (0.0, 500.0)
    latency, bandwidth = fit_latency_bandwidth(((1000, 2.0), (2000, 2.0)))
    assert latency == pytest.approx(2.0) and bandwidth == math.inf
    latency, bandwidth = fit_latency_bandwidth(((1000, 1e-6), (2000, 3e-6)))  # intercept < 0
    assert latency == 0.0 and bandwidth == pytest.approx(5e8)


@pytest.mark.parametrize("table", [(), ((0, 1.0),), ((True, 1.0),), ((100, 0.0),),
                                   ((100, math.nan),), ((200, 1.0), (100, 2.0)),
                                   ((100, 1.0), (100, 2.0)), ((100,),)])
def test_bad_tables_are_refused(table):
    with pytest.raises(FlextuiError, match="calibration: table 'p2p'"):
        calibration(p2p=table)


# -- files -----------------------------------------------------------------------------


def test_file_round_trip_keeps_one_calibration_per_link_kind(tmp_path):
    assert load_calibrations(tmp_path, "A100-SXM4-80GB") == []
    pcie, nvswitch = calibration("pcie"), calibration("nvswitch")
    path = save_calibration(pcie, tmp_path)
    assert path == calibration_path(tmp_path, "A100-SXM4-80GB")
    assert path.name == "a100-sxm4-80gb.comm.msgpack"
    save_calibration(nvswitch, tmp_path)
    assert load_calibrations(tmp_path, "A100-SXM4-80GB") == [pcie, nvswitch]
    newer = calibration("pcie", p2p=((4096, 5e-5),))
    save_calibration(newer, tmp_path)
    assert read_calibrations(path) == [nvswitch, newer]
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, path.name + ".lock"]


def _valid_file(tmp_path):
    return save_calibration(calibration(), tmp_path)


def _document(**changes):
    document = {"format": "flextui-comm-calibration", "version": 1,
                "calibrations": [calibration().to_dict()]}
    document.update(changes)
    return msgpack.packb(document)


@pytest.mark.parametrize("content, message", [
    pytest.param(b"\xc1garbage", "corrupt or truncated", id="garbage"),
    pytest.param(None, "corrupt or truncated", id="truncated"),  # a valid file cut short
    pytest.param(msgpack.packb({"format": "something-else", "version": 1}),
                 "not a flextui communication", id="foreign-format"),
    pytest.param(msgpack.packb([1, 2, 3]), "not a flextui communication", id="foreign-list"),
    pytest.param(_document(version=99), "newer flextui", id="newer"),
    pytest.param(_document(version="1"), "not a format version", id="bad-version"),
    pytest.param(_document(calibrations={}), "bad layout", id="bad-layout"),
    pytest.param(_document(extra=1), "bad layout", id="unknown-key"),
    pytest.param(_document(calibrations=[{"device": "x"}]), r"corrupt \(calibration 0",
                 id="missing-fields"),
    pytest.param(_document(calibrations=[dict(calibration().to_dict(), hops=0)]), "'hops'",
                 id="bad-field"),
    pytest.param(_document(calibrations=[calibration().to_dict()] * 2),
                 "two calibrations of one link kind", id="duplicate-kind"),
])
def test_bad_files_give_one_line_errors_naming_the_file(tmp_path, content, message):
    path = _valid_file(tmp_path)
    path.write_bytes(path.read_bytes()[:-20] if content is None else content)
    with pytest.raises(FlextuiError, match=message) as info:
        read_calibrations(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    before = path.read_bytes()
    with pytest.raises(FlextuiError):  # saving never overwrites what it cannot read
        save_calibration(calibration("pcie"), tmp_path)
    assert path.read_bytes() == before


def test_an_unreadable_path_is_a_flextui_error(tmp_path):
    with pytest.raises(FlextuiError, match="cannot read communication calibration"):
        read_calibrations(tmp_path / "missing.comm.msgpack")


# -- measuring -------------------------------------------------------------------------


@pytest.mark.parametrize("devices, sizes, message", [
    (["cpu"], None, "at least two devices"),
    ([], None, "at least two devices"),
    (["cpu", "cuda:0"], None, "all-CPU or all-CUDA"),
    (["cpu", "nonsense"], None, "bad device"),
    (["cpu", "cpu"], [4096, 6], "multiples of 4"),
    (["cpu", "cpu"], [], "multiples of 4"),
])
def test_measure_comm_refuses_bad_requests_before_starting_anything(devices, sizes, message):
    with pytest.raises(FlextuiError, match=message):
        comm.measure_comm(devices, sizes)


#: the tests that start gloo ranks run one after another on one xdist worker: a group's
#: rank 0 listens on a port that was free a moment before, and a second group's ranks,
#: connecting meanwhile, could take it (test_runtime_ranks.py's torchrun tests, which
#: rendezvous on such a port too, are in the group)
GLOO = pytest.mark.xdist_group("gloo")


def test_default_sizes_are_powers_of_two_from_4_kib():
    assert comm.default_sizes("cpu") == [2**k for k in range(12, 23)]
    assert comm.default_sizes("cuda")[-1] == 2**28
    assert comm.default_sizes("cpu", max_bytes=16384) == [4096, 8192, 16384]


@GLOO
def test_a_calibration_that_runs_out_of_time_ends_in_a_clear_error():
    with pytest.raises(FlextuiError, match="timed out after 0.3 s"):
        comm.measure_comm(["cpu", "cpu"], [4096], repeats=1, timeout_s=0.3)


def test_a_rank_that_dies_ends_in_a_clear_error_and_the_others_are_stopped():
    context = mp.get_context("spawn")
    results = context.Queue()
    procs = [context.Process(target=time.sleep, args=(HANG_S,), daemon=True),
             context.Process(target=os._exit, args=(3,), daemon=True)]
    plan = comm._Plan(("cpu", "cpu"), (4096,), 1, 0, "gloo", 1, 60.0)
    for proc in procs:
        proc.start()
    try:
        with pytest.raises(FlextuiError, match=r"rank 1 \(cpu\) exited with code 3"):
            comm._gather(procs, results, plan, None, time.monotonic() + HANG_S)
        results.put(("error", 0, "RuntimeError: connection closed"))
        with pytest.raises(FlextuiError, match="rank 0 .* failed: RuntimeError: connection"):
            comm._gather(procs, results, plan, None, time.monotonic() + HANG_S)
    finally:
        comm._stop(procs)
    assert not any(p.is_alive() for p in procs)


def _check_measured(cal, world_size, sizes):
    assert (cal.device, cal.backend, cal.link_kind, cal.hops) == ("cpu", "gloo", "loopback", 2)
    assert cal.world_size == world_size
    # between two ranks of local-cpu-N (through its loopback switch) as measured end to end
    route = cpu_ranks(world_size).route(0, 1)
    calibrated = CalibratedCommModel(AnalyticCostModel(), [cal])
    assert sum(calibrated.transfer_s(65536, link) for link in route) == \
        pytest.approx(cal.p2p_s(65536))
    for table in (cal.p2p, cal.allreduce):
        assert [n for n, _ in table] == sizes
        assert all(0 < t < 1 for _, t in table)
        assert table[-1][1] > table[0][1]  # 4096x the bytes takes longer


@GLOO
def test_real_gloo_measurement_with_two_cpu_ranks():
    steps = []
    start = time.perf_counter()
    [cal] = comm.measure_comm(["cpu", "cpu"], [4096, 65536, 2**24], repeats=5,
                            progress=lambda done, total, what: steps.append((done, total)))
    elapsed = time.perf_counter() - start
    _check_measured(cal, 2, [4096, 65536, 2**24])
    assert steps == [(i, 6) for i in range(1, 7)]
    print(f"gloo calibration, 2 ranks, 3 sizes x 5 repeats: {elapsed:.2f} s")


@GLOO
@pytest.mark.slow
def test_real_gloo_measurement_with_three_cpu_ranks():
    [cal] = comm.measure_comm(["cpu"] * 3, [4096, 2**24], repeats=3)
    _check_measured(cal, 3, [4096, 2**24])


def test_gpu_samples_time_many_calls_between_events_on_the_current_stream(monkeypatch):
    """A NCCL sample is the calls back to back between two CUDA events, after a barrier:
    what the GPU spent on them, not the host's time around them."""
    cuda = FakeCuda(monkeypatch, {"send": 0.004, "recv": 0.006})
    took = comm.sample_time(lambda: cuda.log.extend(["send", "recv"]), warmup=1, repeats=3,
                            barrier=lambda: cuda.log.append("barrier"),
                            clock=CudaClock(torch.device("cuda", 0)), calls=comm.iterations(4096),
                            burst=lambda: pytest.fail("no burst of computing on a GPU"))
    assert took == pytest.approx(0.01e-3)       # a round trip's 0.01 ms, per call
    assert cuda.samples() == [["send", "recv"] * comm.MAX_ITERATIONS] * 4
    assert cuda.log.count("barrier") == 4 and "synchronize" not in cuda.log


def test_large_messages_take_fewer_calls_per_sample():
    assert comm.iterations(4096) == comm.MAX_ITERATIONS
    assert comm.iterations(32 * 2**20) == 8
    assert comm.iterations(256 * 2**20) == comm.iterations(2**30) == 1


def sample(name):
    return next(s for s in SAMPLES if s.name.startswith(name))


def test_pairs_are_grouped_by_the_link_kind_of_their_route(monkeypatch):
    dgx1 = sample("DGX-1 (V100)")
    fake_gpus(monkeypatch, dgx1.gpu, 8, dgx1.text)
    nvlink, pcie = comm.link_groups(detect_local(), list(range(8)))
    assert (nvlink.kind, nvlink.hops, pcie.kind, pcie.hops) == ("nvlink", 1, "pcie", 2)
    assert len(nvlink.pairs) == 16 and len(pcie.pairs) == 12   # 4 NVLink peers each
    assert (0, 3) in nvlink.pairs and (0, 5) in pcie.pairs
    assert nvlink.ranks == (0, 1, 2, 3)         # a quad joined pairwise by NVLink
    assert pcie.ranks == (0, 5)
    a100 = sample("DGX A100")
    fake_gpus(monkeypatch, a100.gpu, 8, a100.text)
    [switch] = comm.link_groups(detect_local(), list(range(8)))
    assert (switch.kind, switch.hops, len(switch.pairs), switch.ranks) == \
        ("nvswitch", 2, 28, tuple(range(8)))
    [loopback] = comm.link_groups(cpu_ranks(3), [0, 1, 2])
    assert (loopback.kind, loopback.hops, loopback.ranks) == ("loopback", 2, (0, 1, 2))


def test_each_link_kind_gets_a_calibration_of_its_own(monkeypatch):
    """On a hybrid mesh NVLink pairs and PCIe pairs are calibrated apart, and a
    calibrated model charges each route its own kind's time."""
    dgx1 = sample("DGX-1 (V100)")
    fake_gpus(monkeypatch, dgx1.gpu, 8, dgx1.text)
    machine = detect_local()
    groups = comm.link_groups(machine, list(range(8)))
    plan = comm._Plan(tuple(f"cuda:{i}" for i in range(8)), (4096, 2**20), 3, 1, "nccl", 1,
                      60.0, tuple(groups))
    speed = {"nvlink": (1e-5, 1e-4), "pcie": (1e-4, 1e-3)}
    p2p = {pair: dict(zip(plan.sizes, speed[g.kind])) for g in groups for pair in g.pairs}
    allreduce = {g.kind: {s: [2 * t, 3 * t] for s, t in zip(plan.sizes, speed[g.kind])}
                 for g in groups}
    nvlink, pcie = comm.calibrations(plan, p2p, allreduce, device="V100-SXM2-32GB")
    assert (nvlink.link_kind, nvlink.hops, nvlink.world_size) == ("nvlink", 1, 4)
    assert nvlink.p2p == ((4096, 1e-5), (2**20, 1e-4))
    assert [n for n, _ in nvlink.allreduce] == [4096, 2**20]
    assert [t for _, t in nvlink.allreduce] == pytest.approx([3e-5, 3e-4])   # the slowest rank
    assert (pcie.link_kind, pcie.hops, pcie.world_size) == ("pcie", 2, 2)
    assert pcie.p2p == ((4096, 1e-4), (2**20, 1e-3))
    model = CalibratedCommModel(AnalyticCostModel(), [nvlink, pcie])
    assert sum(model.transfer_s(4096, link) for link in machine.route(0, 3)) == \
        pytest.approx(1e-5)
    assert sum(model.transfer_s(4096, link) for link in machine.route(0, 5)) == \
        pytest.approx(1e-4)


# -- the calibrated cost model ---------------------------------------------------------


class FixedUpdates(AnalyticCostModel):
    def update_s(self, nbytes, device, optimizer=None):
        return 0.25


def test_transfers_over_a_calibrated_link_kind_take_the_measured_time_per_hop():
    dgx, base = cluster("dgx-a100"), AnalyticCostModel()
    wrapped = CalibratedCommModel(base, [calibration("nvswitch", hops=2)])
    link = dgx.route(0, 1)[0]
    assert wrapped.transfer_s(4096, link) == pytest.approx(1e-4 / 2)
    assert wrapped.transfer_s(2**20, link) == pytest.approx(1e-3 / 2)
    assert wrapped.transfer_s(4096, link) != base.transfer_s(4096, link)
    other = CalibratedCommModel(base, [calibration("pcie")])
    assert other.transfer_s(4096, link) == base.transfer_s(4096, link)
    op = model("lenet").ops[1]
    assert wrapped.op_cost(op, (8, *op.outputs[0].shape[1:]), dgx.device(0)) == \
        base.op_cost(op, (8, *op.outputs[0].shape[1:]), dgx.device(0))


def test_allreduce_scales_the_measured_time_by_the_ring_factor():
    dgx = cluster("dgx-a100")
    wrapped = CalibratedCommModel(AnalyticCostModel(), [calibration("nvswitch", world_size=2)])
    assert wrapped.allreduce_s(4096, (0, 1), dgx) == pytest.approx(2e-4)
    assert wrapped.allreduce_s(4096, (0, 1, 2, 3), dgx) == pytest.approx(2e-4 * 1.5)
    p100 = cluster("p100-4x4")  # a ring across nodes mixes link kinds: the link specs
    assert wrapped.allreduce_s(4096, (0, 4), p100) == ring_allreduce_s(4096, (0, 4), p100)


def test_anything_else_is_the_base_models():
    assert CalibratedCommModel(FixedUpdates(), [calibration()]).update_s(100, None) == 0.25
    cpu = cpu_ranks(2).devices[0]
    assert CalibratedCommModel(AnalyticCostModel(), [calibration()]).update_s(100, cpu) == \
        analytic_update_s(100, cpu)
    with pytest.raises(FlextuiError, match="no communication calibration"):
        CalibratedCommModel(AnalyticCostModel(), [])
    with pytest.raises(FlextuiError, match="two communication calibrations"):
        CalibratedCommModel(AnalyticCostModel(), [calibration(), calibration()])


def test_identity_carries_base_and_calibrations_and_rebuilds_the_model():
    base = AnalyticCostModel(compute_efficiency=0.5)
    wrapped = CalibratedCommModel(base, [calibration("pcie"), calibration("nvswitch")])
    assert base.identity in wrapped.identity
    rebuilt = cost_model_from_identity(wrapped.identity)
    assert isinstance(rebuilt, CalibratedCommModel)
    assert rebuilt.identity == wrapped.identity
    assert rebuilt.calibrations == wrapped.calibrations
    assert cost_model_from_identity(base.identity).identity == base.identity
    changed = CalibratedCommModel(base, [calibration("pcie", p2p=((4096, 2e-4),))])
    assert changed.identity != CalibratedCommModel(base, [calibration("pcie")]).identity
    for damaged in (wrapped.identity[:-5], wrapped.identity.replace('"hops":2', '"hops":-1')):
        with pytest.raises(FlextuiError, match="calibrated"):
            cost_model_from_identity(damaged)


@pytest.mark.parametrize("strategy", ["data-parallel", "model-parallel"])
def test_simulating_with_the_calibrated_model(strategy):
    graph, dgx = model("alexnet"), cluster("dgx-a100")
    base = AnalyticCostModel()
    wrapped = CalibratedCommModel(base, [calibration("nvswitch")])
    chosen = builtin_strategy(strategy, graph, dgx)
    timeline = Simulator(graph, dgx, wrapped).simulate(chosen)
    plain = Simulator(graph, dgx, base).simulate(chosen)
    assert timeline.makespan != plain.makespan
    assert Simulator(graph, dgx, wrapped).simulate(chosen).makespan == timeline.makespan
    rebuilt = cost_model_from_identity(wrapped.identity)
    assert Simulator(graph, dgx, rebuilt).simulate(chosen).makespan == timeline.makespan
    unmatched = CalibratedCommModel(base, [calibration("infiniband")])
    assert Simulator(graph, dgx, unmatched).simulate(chosen).makespan == plain.makespan
    if strategy == "data-parallel":  # no transfers; every gradient all-reduced over 8 GPUs
        tasks = [t for t in timeline.tasks if t.kind == TaskKind.SYNC]
        expected = [wrapped.allreduce_s(t.nbytes, tuple(range(8)), dgx) for t in tasks]
    else:
        tasks = [t for t in timeline.tasks if t.kind == TaskKind.TRANSFER]
        expected = [wrapped.transfer_s(t.nbytes, dgx.links[0]) for t in tasks]
    assert tasks
    assert [t.end - t.start for t in tasks] == pytest.approx(expected)


def test_delta_simulation_with_the_calibrated_model_equals_full_simulation():
    graph, dgx = model("lenet"), cluster("dgx-a100")
    wrapped = CalibratedCommModel(AnalyticCostModel(), [calibration("nvswitch")])
    delta, full = DeltaSimulator(graph, dgx, wrapped), Simulator(graph, dgx, wrapped)
    assert delta.reset(builtin_strategy("data-parallel", graph, dgx)) == \
        full.simulate(delta.strategy).cost
    rng = random.Random(7)
    for step in range(30):
        op = rng.choice(graph.ops)
        config = random_config(op, dgx.num_devices, rng)
        cost = delta.propose(op, config)
        assert cost == full.simulate(delta.strategy.replace(op.name, config)).cost
        delta.accept() if step % 2 else delta.reject()
