"""Measuring communication on this machine: point-to-point and all-reduce times.

``measure_comm`` starts one process per device (``torch.multiprocessing``, spawn) joined
by ``torch.distributed`` over a free localhost port — gloo for CPU ranks, NCCL for CUDA
devices — and times, for each message size, between every pair of ranks and then an
all-reduce per link kind. Pairs are grouped by the kind of link their route crosses in
the detected cluster (NVLink, NVSwitch, PCIe; on a DGX-1's hybrid mesh or a PCIe server
with NVLink-bridged pairs, more than one), and each kind gets a calibration of its own:
its pairs' median, and an all-reduce over the largest group of ranks joined pairwise by
that kind alone (``link_groups``). Every sample starts after a barrier, after
``warmup`` untimed ones.

Between GPUs (NCCL) a pair's figure is a ping-pong (one-way time = round trip / 2), and
a sample is ``iterations(size)`` round trips (or all-reduces) back to back between two
CUDA events on the current stream, which NCCL's stream joins around every call
(``cost.clocks``): the communication's own time, not the host's Python calls and
synchronizes around it, which would add tens of microseconds to small messages and to
the fitted latency. Figures are the median of ``repeats`` samples. Between CPU
processes (gloo) communication is timed as a rank of ``flextui launch`` meets it: each
run follows a burst of computing (``BURST_S`` on the rank's thread), a pair's figure is
an exchange (each rank sends the size to the other and receives it, posted together,
as the runtime does), and figures are the mean of the runs, not the median: the ranks'
helper threads find no free core while the ranks compute, so some messages wait for
the scheduler for milliseconds, and a step pays the mean. (On the 2-core development
machine a 4 KiB exchange took 0.2 ms back to back and 1.3 ms on average after
computing; a tensor-parallel MLP's exchanges averaged 0.9 ms against a median of 0.08.)

The parent waits with a deadline, so a rank that fails, dies or hangs ends in one clear
FlextuiError.

Processes are spawned: a script that calls ``measure_comm`` at top level needs the
usual ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import datetime as _dt
import queue as _queue
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from flextui.cost.calibration import CommCalibration
from flextui.cost.clocks import CudaClock
from flextui.errors import FlextuiError
from flextui.machine import Cluster, detect_local
from flextui.machine.cpus import CpuKind
from flextui.machine.detect import cpu_ranks
from flextui.machine.gpus import device_kind_name

MIN_BYTES = 4 * 2**10
#: seconds a CPU rank computes before each timed run (see the module docstring)
BURST_S = 1e-3
DEFAULT_MAX_BYTES = {"cpu": 4 * 2**20, "cuda": 256 * 2**20}
#: GPU calls back to back in one timed sample: up to this many, fewer for large messages
#: (a sample moves at most ``SAMPLE_BYTES``), at least one
MAX_ITERATIONS = 20
SAMPLE_BYTES = 256 * 2**20


def iterations(size: int) -> int:
    """GPU calls per timed sample for messages of ``size`` bytes."""
    return max(1, min(MAX_ITERATIONS, SAMPLE_BYTES // size))

#: ``progress(done, total, what)``, called in the calling process after each step
Progress = Callable[[int, int, str], None]


def default_sizes(device_type: str, max_bytes: int | None = None) -> list[int]:
    """Powers of two from 4 KiB up to ``max_bytes`` (4 MiB on CPU, 256 MiB on GPU)."""
    top = max_bytes if max_bytes is not None else DEFAULT_MAX_BYTES.get(device_type, 2**20)
    sizes, n = [], MIN_BYTES
    while n <= top:
        sizes.append(n)
        n *= 2
    return sizes


@dataclass(frozen=True)
class LinkGroup:
    """The rank pairs whose route crosses links of one kind only, ``hops`` of them, and
    the ranks an all-reduce over that kind runs on (every pair of them of that kind)."""

    kind: str
    hops: int
    pairs: tuple[tuple[int, int], ...]
    ranks: tuple[int, ...]


def link_groups(cluster: Cluster, devices: Sequence[int]) -> list[LinkGroup]:
    """The pairs of ranks (rank k on cluster device ``devices[k]``) grouped by the link
    kind of their routes, in order of first appearance; a route mixing kinds is left
    out. A kind's all-reduce ranks start with its first pair and take each further rank
    joined to all of them by that kind."""
    found: dict[str, tuple[int, list[tuple[int, int]]]] = {}
    n = len(devices)
    for i in range(n):
        for j in range(i + 1, n):
            route = cluster.route(devices[i], devices[j])
            kinds = {link.kind for link in route}
            if len(kinds) == 1:
                found.setdefault(kinds.pop(), (len(route), []))[1].append((i, j))
    groups = []
    for kind, (hops, pairs) in found.items():
        joined = set(pairs)
        ranks = list(pairs[0])
        for k in range(n):
            if k not in ranks and all((min(k, r), max(k, r)) in joined for r in ranks):
                ranks.append(k)
        groups.append(LinkGroup(kind, hops, tuple(pairs), tuple(sorted(ranks))))
    return groups


@dataclass(frozen=True)
class _Plan:
    """What every rank runs (sent to the spawned processes)."""

    devices: tuple[str, ...]
    sizes: tuple[int, ...]
    repeats: int
    warmup: int
    backend: str
    port: int
    timeout_s: float
    groups: tuple[LinkGroup, ...] = ()

    @property
    def pairs(self) -> list[tuple[int, int]]:
        return [pair for group in self.groups for pair in group.pairs]


def measure_comm(devices: Sequence[str], sizes: Sequence[int] | None = None, repeats: int = 10,
                 backend: str | None = None, *, warmup: int = 3,
                 progress: Progress | None = None,
                 timeout_s: float = 300.0) -> list[CommCalibration]:
    """Time send/recv and all-reduce among ``devices`` (``["cpu", "cpu"]``,
    ``["cuda:0", "cuda:1"]``...) for each of ``sizes`` bytes (default: ``default_sizes``)
    and return a calibration per link kind between them. ``backend`` defaults to NCCL
    on CUDA, gloo on CPU; the whole run must end within ``timeout_s`` seconds."""
    device_type, indices = _check_devices(devices)
    backend = backend or ("nccl" if device_type == "cuda" else "gloo")
    if not (dist.is_available() and dist.is_backend_available(backend)):
        raise FlextuiError(f"torch.distributed backend {backend!r} is not available in this "
                           f"torch build; use gloo for CPU devices, nccl for CUDA devices")
    sizes = sorted(set(default_sizes(device_type) if sizes is None else sizes))
    if not sizes or any(not isinstance(s, int) or isinstance(s, bool) or s <= 0 or s % 4
                        for s in sizes):
        raise FlextuiError(f"message sizes must be positive multiples of 4 bytes, found {sizes}")
    if repeats < 1 or warmup < 0:
        raise FlextuiError(f"repeats must be >= 1 and warmup >= 0, found {repeats}, {warmup}")
    if not timeout_s > 0:
        raise FlextuiError(f"the calibration timeout must be positive, found {timeout_s!r}")
    # CPU ranks: those of local-cpu-N (rank, loopback switch, rank); GPUs: the detected machine
    cluster = cpu_ranks(len(devices)) if device_type == "cpu" else detect_local()
    groups = link_groups(cluster, indices or list(range(len(devices))))
    plan = _Plan(tuple(devices), tuple(sizes), repeats, warmup, backend, _free_port(),
                 timeout_s, tuple(groups))
    context = mp.get_context("spawn")
    results = context.Queue()
    procs = [context.Process(target=_rank_main, args=(rank, plan, results), daemon=True)
             for rank in range(len(devices))]
    try:
        for proc in procs:
            proc.start()
        p2p, allreduce = _gather(procs, results, plan, progress, time.monotonic() + timeout_s)
    finally:
        _stop(procs)
    kind = (CpuKind.MACHINE.value if device_type == "cpu"
            else device_kind_name(torch.cuda.get_device_name(indices[0])))
    return calibrations(plan, p2p, allreduce, device=kind)


def calibrations(plan: _Plan, p2p: dict[tuple[int, int], dict[int, float]],
                 allreduce: dict[str, dict[int, list[float]]], *,
                 device: str) -> list[CommCalibration]:
    """A calibration per link kind of ``plan``: the median over its pairs of their one-way
    times (``p2p[pair][size]``), and its all-reduce (``allreduce[kind][size]``: each
    rank's time; the slowest counts)."""
    measured_at = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [CommCalibration(
        device=device, backend=plan.backend, link_kind=group.kind, hops=group.hops,
        world_size=len(group.ranks), torch_version=torch.__version__.split("+")[0],
        measured_at=measured_at,
        p2p=tuple((s, statistics.median(p2p[pair][s] for pair in group.pairs))
                  for s in plan.sizes),
        allreduce=tuple((s, max(allreduce[group.kind][s])) for s in plan.sizes))
        for group in plan.groups]


def _check_devices(devices: Sequence[str]) -> tuple[str, list[int]]:
    """The device type ("cpu" or "cuda") and the CUDA index of each device."""
    if len(devices) < 2:
        raise FlextuiError(f"communication calibration needs at least two devices, found "
                           f"{len(devices)}; e.g. ['cpu', 'cpu'] or ['cuda:0', 'cuda:1']")
    try:
        parsed = [torch.device(d) for d in devices]
    except (RuntimeError, TypeError) as exc:
        raise FlextuiError(f"bad device in {list(devices)}: {exc}") from None
    types = {d.type for d in parsed}
    if len(types) != 1 or not types <= {"cpu", "cuda"}:
        raise FlextuiError(f"calibrate all-CPU or all-CUDA devices, found {list(devices)}")
    if types == {"cpu"}:
        return "cpu", []
    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    indices = [i if d.index is None else d.index for i, d in enumerate(parsed)]
    if any(i >= available for i in indices):
        raise FlextuiError(f"devices {list(devices)} need CUDA devices 0..{max(indices)}, "
                           f"this machine has {available}")
    if len(set(indices)) != len(indices):
        raise FlextuiError(f"devices {list(devices)} name one GPU twice; give each rank its own")
    return "cuda", indices


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the calling process ---------------------------------------------------------------


def _gather(procs: list[Any], results: Any, plan: _Plan, progress: Progress | None,
            deadline: float) -> tuple[dict[tuple[int, int], dict[int, float]],
                                      dict[str, dict[int, list[float]]]]:
    """Read the ranks' messages until every rank is done: (per pair and size, its
    one-way time), (per link kind and size, the all-reduce time of each rank). Raises
    FlextuiError on a rank's error or death, or at ``deadline``."""
    p2p: dict[tuple[int, int], dict[int, float]] = {}
    allreduce: dict[str, dict[int, list[float]]] = {}
    total = len(plan.sizes) * (len(plan.pairs) + len(plan.groups))
    step = 0
    done: set[int] = set()
    while len(done) < len(procs):
        if time.monotonic() > deadline:
            waiting = [r for r in range(len(procs)) if r not in done]
            raise FlextuiError(f"communication calibration timed out after {plan.timeout_s:g} s "
                               f"(ranks {waiting} did not finish); allow more time, measure "
                               f"fewer or smaller sizes, or check that the devices work")
        try:
            message = results.get(timeout=0.2)
        except _queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                raise _failure(procs, results, plan) from None
            continue
        tag, *body = message
        if tag == "p2p":
            pair, size, seconds = body
            p2p.setdefault(tuple(pair), {})[size] = seconds
        elif tag == "allreduce":
            kind, size, seconds = body
            allreduce.setdefault(kind, {}).setdefault(size, []).append(seconds)
        elif tag == "progress":
            step += 1
            if progress is not None:
                progress(step, total, body[0])
        elif tag == "done":
            done.add(body[0])
        elif tag == "error":
            raise _failure(procs, results, plan, (body[0], body[1]))
    return p2p, allreduce


def _failure(procs: list[Any], results: Any, plan: _Plan,
             error: tuple[int, str] | None = None) -> FlextuiError:
    """The clearest account of a failed run: a rank killed by a signal (its peers' errors
    follow from it), else the first error a rank reported, else a rank's exit code."""
    end = time.monotonic() + 1.0
    while error is None and time.monotonic() < end:  # a rank's own words may be in flight
        try:
            tag, *body = results.get(timeout=0.1)
        except _queue.Empty:
            continue
        if tag == "error":
            error = (body[0], body[1])
    codes = [p.exitcode for p in procs]
    prefix = "communication calibration failed: rank"
    advice = "check the devices and the backend (any output of the rank is above)"
    for rank, code in enumerate(codes):
        if code is not None and code < 0:
            return FlextuiError(f"{prefix} {rank} ({plan.devices[rank]}) was killed by "
                                f"signal {-code}; {advice}")
    if error is not None:
        rank, text = error
        return FlextuiError(f"{prefix} {rank} ({plan.devices[rank]}) failed: {text}; {advice}")
    rank, code = next((r, c) for r, c in enumerate(codes) if c not in (None, 0))
    return FlextuiError(f"{prefix} {rank} ({plan.devices[rank]}) exited with code {code}; "
                        f"{advice}")


def _stop(procs: list[Any]) -> None:
    """End every rank still running (after a failure) and reap them all."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join()


# -- a rank ----------------------------------------------------------------------------


def _rank_main(rank: int, plan: _Plan, results: Any) -> None:
    """Entry point of a spawned rank: measure, or report the first line of what failed."""
    try:
        _measure(rank, plan, results)
    except BaseException as exc:  # noqa: BLE001 (reported to the parent, which raises)
        lines = str(exc).strip().splitlines()
        results.put(("error", rank, f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]))
        results.close()
        results.join_thread()
        raise SystemExit(1) from None


def _measure(rank: int, plan: _Plan, results: Any) -> None:
    device = torch.device(plan.devices[rank])
    cuda = device.type == "cuda"
    if cuda:
        device = torch.device("cuda", rank if device.index is None else device.index)
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)  # ranks share the cores; they only move bytes
    dist.init_process_group(plan.backend, init_method=f"tcp://127.0.0.1:{plan.port}",
                            rank=rank, world_size=len(plan.devices),
                            timeout=_dt.timedelta(seconds=plan.timeout_s))
    # every rank creates every group, in one order (a collective call)
    subgroups = [None if len(g.ranks) == len(plan.devices) else dist.new_group(list(g.ranks))
                 for g in plan.groups]

    def barrier() -> None:
        if plan.backend == "nccl":
            dist.barrier(device_ids=[device.index])
            torch.cuda.synchronize(device)
        else:
            dist.barrier()

    work = torch.ones(64, 64)

    def burst() -> None:
        """Compute for BURST_S on this rank's thread, as a rank does between messages."""
        end = time.perf_counter() + BURST_S
        while time.perf_counter() < end:
            torch.mm(work, work)

    clock = CudaClock(device) if cuda else None

    def timed(run: Callable[[], object], size: int) -> float:
        return sample_time(run, warmup=plan.warmup, repeats=plan.repeats, barrier=barrier,
                           clock=clock, calls=iterations(size), burst=burst)

    def exchange(x: torch.Tensor, peer: int, into: torch.Tensor) -> None:
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer),
                                            dist.P2POp(dist.irecv, into, peer)]):
            work.wait()

    buffer = torch.zeros(max(plan.sizes) // 4, dtype=torch.float32, device=device)
    other = torch.zeros_like(buffer)
    for a, b in plan.pairs:  # open every connection before timing anything
        if rank == a:
            dist.send(buffer, b)
        elif rank == b:
            dist.recv(buffer, a)
    dist.all_reduce(buffer)
    for a, b in plan.pairs:
        for size in plan.sizes:
            x, y = buffer[:size // 4], other[:size // 4]
            # timed() calls each lambda before the loop moves on
            if rank == a and cuda:
                results.put(("p2p", (a, b), size,
                             timed(lambda: (dist.send(x, b), dist.recv(x, b)), size) / 2))  # noqa: B023
            elif rank == b and cuda:
                timed(lambda: (dist.recv(x, a), dist.send(x, a)), size)  # noqa: B023
            elif rank in (a, b):
                took = timed(lambda: exchange(x, b if rank == a else a, y), size)  # noqa: B023
                if rank == a:
                    results.put(("p2p", (a, b), size, took))
            else:
                timed(lambda: None, size)  # keeps step with the barriers
            if rank == 0:
                results.put(("progress", f"send/recv {a}<->{b}: {size} bytes"))
    for group, subgroup in zip(plan.groups, subgroups):
        for size in plan.sizes:
            x = buffer[:size // 4]
            if rank in group.ranks:
                took = timed(lambda: dist.all_reduce(x, group=subgroup), size)  # noqa: B023
                results.put(("allreduce", group.kind, size, took))
            else:
                timed(lambda: None, size)
            if rank == 0:
                results.put(("progress", f"all-reduce over {group.kind}, "
                                         f"{len(group.ranks)} ranks: {size} bytes"))
    barrier()
    dist.destroy_process_group()
    results.put(("done", rank))


def sample_time(run: Callable[[], object], *, warmup: int, repeats: int,
                barrier: Callable[[], None], clock: CudaClock | None, calls: int,
                burst: Callable[[], None]) -> float:
    """Seconds of one ``run`` over ``repeats`` samples after ``warmup`` untimed ones, each
    sample after a ``barrier``. On GPUs (``clock``) a sample is ``calls`` runs back to
    back between CUDA events, and the figure the median of the samples; on the CPU a
    sample is one run after a ``burst`` of computing, on the monotonic clock, and the
    figure their mean (see the module docstring)."""
    times = []
    for i in range(warmup + repeats):
        barrier()
        if clock is not None:
            took = clock.time(run, calls)
        else:
            burst()
            start = time.perf_counter()
            run()
            took = time.perf_counter() - start
        if i >= warmup:
            times.append(took)
    return statistics.median(times) if clock is not None else statistics.fmean(times)
