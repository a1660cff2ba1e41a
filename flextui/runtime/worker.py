"""The rank program: ``python -m flextui.runtime.worker PLAN``, started by torchrun.

Simulated device *i* is global rank *i*; a rank trains on ``cuda:LOCAL_RANK`` when the
launch uses NCCL and on the CPU otherwise. It reads the launch plan (``spec``: with an
imported model, the model source the user gave, from which it builds the module's
weights and what its opaque ops run, ``module_weights`` and ``regions``), compiles
the same step as every other rank (``plan``), trains (``engine``) and reports on stdout
(``metrics``). With a check it then trains the referee in this process (``referee``:
the user's module, or the whole graph of a model flextui built) and reports how far
its own parameter shards and the loss are from it.

A watchdog thread ends the rank at once when the process that started it (torchrun's
agent) or the launcher (``FLEXTUI_LAUNCHER_PID``) is gone, so no rank outlives its
launch however the launch ends.

A loss that is not finite (a diverging run: a learning rate too large) ends the rank
once it has reported that step: it raises FloatingPointError naming the step, so the
launch fails naming the rank, as a trainer stops on it, rather than train on NaNs.

``FLEXTUI_RANK_FAULT=RANK:STEP`` makes rank RANK raise at step STEP: how the tests (and
anyone trying a launch's teardown) make one rank fail.
"""

from __future__ import annotations

import math
import os
import resource
import socket
import sys
import threading
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from flextui.cost.localdevice import cpu_name
from flextui.graph.kernels.whole import relative_error
from flextui.graph.region import within
from flextui.runtime import checkpoint
from flextui.runtime.comm import Comm
from flextui.runtime.data import DataError, evaluation_feed, rank_feed, whole_feed
from flextui.runtime.engine import RankProgram
from flextui.runtime.metrics import (
    MAX_LINE,
    Check,
    End,
    Evaluated,
    Failed,
    Reporter,
    Start,
    encode,
)
from flextui.runtime.plan import compile_plan
from flextui.runtime.referee import train_referee
from flextui.runtime.regions import bind_regions
from flextui.runtime.spec import LAUNCHER_PID, Backend, LaunchSpec
from flextui.runtime.tasktimes import TaskTimes
from flextui.sim.buckets import bucket_limit

RANK_FAULT = "FLEXTUI_RANK_FAULT"
WATCH_S = 0.5


# record leaves an error file with the time of the failure, so torchrun names the rank
# that failed first, not a peer whose connection to it broke
@record
def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m flextui.runtime.worker PLAN (started by flextui launch)",
              file=sys.stderr)
        return 2
    _watch_parents()
    spec = LaunchSpec.read(args[0])
    training = spec.training
    nccl = training.backend == Backend.NCCL
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}" if nccl else "cpu")
    if nccl:
        torch.cuda.set_device(device)
    dist.init_process_group(str(training.backend))
    rank = dist.get_rank()
    try:
        return _run(spec, rank, device)
    except DataError as exc:  # the user's data: its message says it all, no traceback
        _failed(rank, exc)
        return 2
    except Exception as exc:
        _failed(rank, exc)
        raise
    finally:
        dist.destroy_process_group()


def _failed(rank: int, exc: Exception) -> None:
    """Say when this rank failed, to the launcher: the rank that failed first is the
    cause, the peers that lost their connection to it after are not (clocks of one
    cluster); the words are cut so that, escaped, the record stays under MAX_LINE."""
    _print(encode(Failed(rank, time.time(), f"{type(exc).__name__}: {exc}"[:MAX_LINE // 8])))


def _run(spec: LaunchSpec, rank: int, device: torch.device) -> int:
    training = spec.training
    world = dist.get_world_size()
    if world != spec.num_ranks:
        raise RuntimeError(f"the plan is for {spec.num_ranks} ranks, torchrun started {world}")
    bind_regions(spec.graph)  # what its opaque ops run: the module the plan carries
    plan = compile_plan(spec.graph, spec.strategy, spec.num_ranks,
                        bucket_limit(on_cpu=device.type == "cpu"))
    dtype = getattr(torch, str(training.dtype))
    comm = Comm(rank, plan.sync_groups(), device)
    program = RankProgram(plan, rank, comm, seed=training.seed, dtype=dtype,
                          optimizer=training.update, record_tasks=training.record_tasks,
                          data=rank_feed(spec, plan, rank, dtype, device))
    saving = training.checkpoint
    first = saving.start  # the steps a resumed run did before
    if saving.resume:
        checkpoint.resume(spec, program)
    task_times = TaskTimes(program.task_counts())
    reporter = Reporter(rank, _print, _memory(device), _utilisation(device))
    reporter.emit(Start(rank, os.getpid(), socket.gethostname(), str(device),
                        training.steps, training.warmup))
    total = training.warmup + training.steps
    fault = _fault()
    losses = []
    for step in range(total):
        if fault == (rank, step):
            raise RuntimeError(f"rank {rank} fails at step {step}, as {RANK_FAULT} asks")
        result = program.step(first + step)
        losses.append(result.loss_share)
        if step >= training.warmup:
            task_times.add(result.task_s)
        finite = math.isfinite(result.loss_share)
        reporter.step(step, step < training.warmup, result.loss_share, result.step_s,
                      result.compute_s, result.wait_s, result.sent, result.received,
                      last=step in (training.warmup - 1, total - 1) or not finite)
        if not finite:
            raise FloatingPointError(f"the loss became {result.loss_share} at step {step + 1} "
                                     f"of {total}; a smaller learning rate may keep it finite")
        if saving.every and (first + step + 1) % saving.every == 0:
            checkpoint.save(spec, program, first + step + 1)
        every = training.data.eval_every
        if every and (step + 1) % every == 0:  # the validation split, forward only
            reporter.emit(Evaluated(rank, step, program.evaluate(
                *evaluation_feed(spec, plan, rank, dtype, device))))
    reporter.flush()
    if training.record_tasks:
        for record in task_times.records(rank, _profile_device(device)):
            reporter.emit(record)
    if training.check:
        _check(spec, program, losses, reporter, total, dtype, device)
    reporter.emit(End(rank))
    return 0


def _check(spec: LaunchSpec, program: RankProgram, losses: list[float], reporter: Reporter,
           steps: int, dtype: torch.dtype, device: torch.device) -> None:
    """Train the referee in this process (the user's module for an imported graph, else
    the whole graph: ``referee``) and report the largest relative error of this rank's
    parameter shards and of the summed loss of every step."""
    # on the rank's device: NCCL reduces GPU tensors only
    totals = torch.tensor(losses, dtype=torch.float64, device=device)
    dist.all_reduce(totals)  # the loss of each step: the ranks' shares summed
    training = spec.training
    reference = train_referee(spec.graph, steps, seed=training.seed, dtype=dtype,
                              optimizer=training.update,
                              strategy=spec.strategy,
                              data=whole_feed(spec.graph, training, steps, dtype))
    loss_error = max((abs(a - b) / max(abs(b), 1e-300)
                      for a, b in zip(totals.tolist(), reference.losses)), default=0.0)
    # every shard judged at the scale of the model's largest parameter: a batch norm's
    # bias near zero is a sum of gradients that cancel, rounded at the size of its terms
    # (a ResNet-50's, 1e-4 after 3 steps, differed by 3.7e-9 of itself)
    scale = max((float(p.abs().max()) for p in reference.params.values() if p.numel()),
                default=0.0)
    param_error = 0.0
    with program.whole_params():
        for name, box in program.boxes.items():
            whole = reference.params[name]
            full = tuple((0, size) for size in whole.shape)
            param_error = max(param_error, relative_error(
                program.params[name].detach().cpu(), whole[within(box, full)], scale))
    reporter.emit(Check(reporter.rank, loss_error, param_error, tuple(totals.tolist()),
                        tuple(reference.losses)))


def _profile_device(device: torch.device) -> str:
    """The name profiles of this rank's device have: the GPU's, or the CPU's with the
    threads this rank computes with."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_name(torch.get_num_threads())


def _fault() -> tuple[int, int] | None:
    text = os.environ.get(RANK_FAULT, "")
    rank, _, step = text.partition(":")
    return (int(rank), int(step)) if rank.isdigit() and step.isdigit() else None


def _print(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _memory(device: torch.device) -> Callable[[], int]:
    if device.type == "cuda":
        return lambda: int(torch.cuda.max_memory_allocated(device))
    return lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _utilisation(device: torch.device) -> Callable[[], float | None]:
    """GPU utilisation in percent through NVML (nvidia-ml-py), None without it. NVML
    counts every GPU of the machine and CUDA only those ``CUDA_VISIBLE_DEVICES`` leaves,
    so the device is found by its UUID, never by its index."""
    if device.type != "cuda":
        return lambda: None
    try:
        import pynvml  # type: ignore[import-not-found]  # optional: nvidia-ml-py
        pynvml.nvmlInit()
        uuid = f"GPU-{torch.cuda.get_device_properties(device).uuid}"
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    except Exception:  # noqa: BLE001 (no NVML, no driver, a MIG slice: not known)
        return lambda: None
    return lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)


def _watch_parents() -> None:
    """End this process when its parent or the launcher is gone."""
    parent = os.getppid()
    launcher = int(os.environ.get(LAUNCHER_PID, "0") or 0)

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def watch() -> None:
        while True:
            time.sleep(WATCH_S)
            if os.getppid() != parent or (launcher and not alive(launcher)):
                os._exit(1)

    threading.Thread(target=watch, name="flextui-watchdog", daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
