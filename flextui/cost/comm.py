"""Measuring communication on this machine: point-to-point and all-reduce times.

``measure_comm`` starts one process per device (``torch.multiprocessing``, spawn) joined
by ``torch.distributed`` over a free localhost port — gloo for CPU ranks, NCCL for CUDA
devices — and times, for each message size, between every pair of ranks and then an
all-reduce over all ranks. Every run starts after a barrier, after ``warmup`` untimed
ones.

Between GPUs (NCCL) a pair's figure is a ping-pong (one-way time = round trip / 2), the
median of ``repeats`` runs, bracketed by ``torch.cuda.synchronize``. Between CPU
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
from flextui.errors import FlextuiError
from flextui.machine import detect_local
from flextui.machine.detect import cpu_ranks
from flextui.machine.gpus import device_kind_name

MIN_BYTES = 4 * 2**10
#: seconds a CPU rank computes before each timed run (see the module docstring)
BURST_S = 1e-3
DEFAULT_MAX_BYTES = {"cpu": 4 * 2**20, "cuda": 256 * 2**20}

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
class _Plan:
    """What every rank runs (sent to the spawned processes)."""

    devices: tuple[str, ...]
    sizes: tuple[int, ...]
    repeats: int
    warmup: int
    backend: str
    port: int
    timeout_s: float

    @property
    def pairs(self) -> list[tuple[int, int]]:
        n = len(self.devices)
        return [(i, j) for i in range(n) for j in range(i + 1, n)]


def measure_comm(devices: Sequence[str], sizes: Sequence[int] | None = None, repeats: int = 10,
                 backend: str | None = None, *, warmup: int = 3,
                 progress: Progress | None = None, timeout_s: float = 300.0) -> CommCalibration:
    """Time send/recv and all-reduce among ``devices`` (``["cpu", "cpu"]``,
    ``["cuda:0", "cuda:1"]``...) for each of ``sizes`` bytes (default: ``default_sizes``)
    and return the calibration. ``backend`` defaults to NCCL on CUDA, gloo on CPU; the
    whole run must end within ``timeout_s`` seconds."""
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
    plan = _Plan(tuple(devices), tuple(sizes), repeats, warmup, backend, _free_port(), timeout_s)
    link_kind, hops = _measured_link(device_type, indices)
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
    kind = ("cpu" if device_type == "cpu"
            else device_kind_name(torch.cuda.get_device_name(indices[0])))
    return CommCalibration(
        device=kind, backend=backend, link_kind=link_kind, hops=hops, world_size=len(devices),
        torch_version=torch.__version__.split("+")[0],
        measured_at=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        p2p=tuple((s, statistics.median(p2p[s])) for s in sizes),
        allreduce=tuple((s, max(allreduce[s])) for s in sizes))


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


def _measured_link(device_type: str, indices: list[int]) -> tuple[str, int]:
    """(link kind, hops) of the route the measurement crosses in the detected cluster,
    or for CPU ranks in ``local-cpu-N`` (rank, loopback switch, rank: two links)."""
    cluster = cpu_ranks(2) if device_type == "cpu" else detect_local()
    route = cluster.route(*(indices[:2] if indices else (0, 1)))
    return route[0].kind, len(route)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the calling process ---------------------------------------------------------------


def _gather(procs: list[Any], results: Any, plan: _Plan, progress: Progress | None,
            deadline: float) -> tuple[dict[int, list[float]], dict[int, list[float]]]:
    """Read the ranks' messages until every rank is done: (per size, the one-way time of
    each pair), (per size, the all-reduce time of each rank). Raises FlextuiError on a
    rank's error or death, or at ``deadline``."""
    p2p: dict[int, list[float]] = {}
    allreduce: dict[int, list[float]] = {}
    total = len(plan.sizes) * (len(plan.pairs) + 1)
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
            p2p.setdefault(body[0], []).append(body[1])
        elif tag == "allreduce":
            allreduce.setdefault(body[0], []).append(body[1])
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

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    def barrier() -> None:
        if plan.backend == "nccl":
            dist.barrier(device_ids=[device.index])
        else:
            dist.barrier()

    work = torch.ones(64, 64)

    def burst() -> None:
        """Compute for BURST_S on this rank's thread, as a rank does between messages."""
        end = time.perf_counter() + BURST_S
        while time.perf_counter() < end:
            torch.mm(work, work)

    def timed(run: Callable[[], object]) -> float:
        """Seconds of ``run`` over the repeats, after the warm-up runs: on GPUs the
        median; on the CPU the mean, each run after a burst of computing."""
        times = []
        for i in range(plan.warmup + plan.repeats):
            barrier()
            sync()
            if not cuda:
                burst()
            start = time.perf_counter()
            run()
            sync()
            if i >= plan.warmup:
                times.append(time.perf_counter() - start)
        return statistics.median(times) if cuda else statistics.fmean(times)

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
                results.put(("p2p", size,
                             timed(lambda: (dist.send(x, b), dist.recv(x, b))) / 2))  # noqa: B023
            elif rank == b and cuda:
                timed(lambda: (dist.recv(x, a), dist.send(x, a)))  # noqa: B023
            elif rank in (a, b):
                took = timed(lambda: exchange(x, b if rank == a else a, y))  # noqa: B023
                if rank == a:
                    results.put(("p2p", size, took))
            else:
                timed(lambda: None)  # keeps step with the barriers
            if rank == 0:
                results.put(("progress", f"send/recv {a}<->{b}: {size} bytes"))
    for size in plan.sizes:
        x = buffer[:size // 4]
        results.put(("allreduce", size, timed(lambda: dist.all_reduce(x))))  # noqa: B023
        if rank == 0:
            results.put(("progress", f"all-reduce over {len(plan.devices)}: {size} bytes"))
    barrier()
    dist.destroy_process_group()
    results.put(("done", rank))
