"""The profiler's CUDA paths walked on the CPU with a stand-in for torch.cuda
(``fake_cuda``), so the timing, memory and failure handling that only a GPU reaches are
checked here, with no GPU and no clock."""

import weakref

import pytest
import torch

from fake_cuda import FakeCuda
from flextui.cost import profile as profiler
from flextui.cost.cache import ProfileCache
from flextui.cost.clocks import CudaClock
from flextui.cost.estimate import MAX_RUNS
from flextui.cost.localdevice import cpu_name
from flextui.cost.signatures import Measurement, task_signatures
from flextui.errors import FlextuiError
from helpers import model

CUDA = torch.device("cuda", 0)
#: what the stand-in GPU takes per run (ms)
FORWARD_MS, BACKWARD_MS = 0.01, 0.03


def conv1(training=True):
    measurement = Measurement("float32", training, cpu_name(), torch.__version__)
    [signature] = [s for s in task_signatures(model("lenet", batch_size=4), measurement,
                                              num_devices=1) if s.op.name == "conv1"]
    return signature


def fake_cuda(monkeypatch) -> FakeCuda:
    """The stand-in GPU, with the task's forward and backward runs logged."""
    cuda = FakeCuda(monkeypatch, {"forward": FORWARD_MS, "backward": BACKWARD_MS})
    kernel = profiler.kernel_for("conv2d")
    forward, grad = kernel.forward_loss, torch.autograd.grad

    def logged_forward(*args):
        cuda.log.append("forward")
        return forward(*args)

    def logged_grad(*args, **kwargs):
        cuda.log.append("backward")
        return grad(*args, **kwargs)
    monkeypatch.setattr(kernel, "forward_loss", logged_forward)
    monkeypatch.setattr(torch.autograd, "grad", logged_grad)
    return cuda


def test_runs_are_timed_back_to_back_between_one_pair_of_events(monkeypatch):
    cuda = fake_cuda(monkeypatch)
    entry = profiler._time_task(conv1(), torch.device("cpu"), torch.float32, True, 1, 3,
                                CudaClock(CUDA))
    samples = cuda.samples()
    # one run of each to size the samples, then 3 samples of 1 ms or more each
    forward_runs = MAX_RUNS            # 1 ms / 0.01 ms
    backward_runs = 34                          # ceil(1 ms / 0.03 ms)
    assert samples == [["forward"], ["backward"]] + \
        [["forward"] * forward_runs, ["backward"] * backward_runs] * 3
    assert entry.forward_s == pytest.approx(FORWARD_MS / 1e3)
    assert entry.backward_s == pytest.approx(BACKWARD_MS / 1e3)
    assert entry.repeats == 3 and entry.peak_memory_bytes == 4096
    # each sample ends with waiting for its end event, and nothing waits inside one
    assert all("synchronize" not in s and "event synchronize" not in s for s in samples)


def test_inference_times_forward_runs_only(monkeypatch):
    cuda = fake_cuda(monkeypatch)
    entry = profiler._time_task(conv1(False), torch.device("cpu"), torch.float32, False, 0, 2,
                                CudaClock(CUDA))
    assert cuda.samples() == [["forward"]] + [["forward"] * MAX_RUNS] * 2
    assert entry.backward_s is None and "backward" not in cuda.log


def test_a_run_allocates_with_no_earlier_runs_outputs_or_gradients_alive(monkeypatch):
    """Peak memory is one forward and backward's: every forward starts with the outputs
    (and graph) of the ones before it released, every backward with the earlier
    gradients released."""
    kernel = profiler.kernel_for("conv2d")
    forward, grad = kernel.forward_loss, torch.autograd.grad
    outputs: list[weakref.ref] = []
    grads: list[weakref.ref] = []
    alive_at_runs: list[int] = []

    def watched_forward(*args):
        alive_at_runs.append(sum(ref() is not None for ref in outputs + grads))
        result = forward(*args)
        outputs.extend(weakref.ref(t) for t in result[0])
        return result

    def watched_grad(*args, **kwargs):
        alive_at_runs.append(sum(ref() is not None for ref in grads))
        result = grad(*args, **kwargs)
        grads.extend(weakref.ref(t) for t in result if t is not None)
        return result
    monkeypatch.setattr(kernel, "forward_loss", watched_forward)
    monkeypatch.setattr(torch.autograd, "grad", watched_grad)
    entry = profiler.time_task(conv1(), torch.device("cpu"), warmup=1, repeats=2)
    assert entry.forward_s > 0 and len(alive_at_runs) >= 6
    assert set(alive_at_runs) == {0}


def test_the_cache_is_emptied_once_the_failed_tasks_tensors_are_gone(monkeypatch):
    held: list[weakref.ref] = []
    alive_when_emptied: list[bool] = []

    def exhausted(*args):
        block = torch.empty(1000)
        held.append(weakref.ref(block))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
    monkeypatch.setattr(profiler, "_time_task", exhausted)
    monkeypatch.setattr(torch.cuda, "empty_cache",
                        lambda: alive_when_emptied.append(held[0]() is not None))
    entry, failure = profiler.attempt_task(conv1(), CUDA)
    assert entry.oom and failure.startswith("out of memory (OutOfMemoryError: CUDA out")
    assert alive_when_emptied == [False]


@pytest.mark.parametrize("error, recorded", [
    (torch.AcceleratorError("CUDA error: an illegal memory access was encountered"), True),
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
     True),
    (RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed "
                  "in a non-contiguous input."), True),
    (RuntimeError("Expected canUse32BitIndexMath(input) && canUse32BitIndexMath(output) to be "
                  "true, but got false."), True),
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)"), False),
])
def test_a_gpu_error_on_one_block_is_recorded_for_that_block(monkeypatch, tmp_path, error,
                                                             recorded):
    """Errors of the device on one block are kept per task, as out of memory is, and
    profiling goes on; an error that is flextui's own fault is raised."""
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    signatures = task_signatures(model("lenet", batch_size=4),
                                 Measurement("float32", True, cpu_name(), torch.__version__),
                                 num_devices=1)

    def failing(signature, *args):
        if signature.op.name == "conv1":
            raise error
        return profiler.ProfileEntry(1e-3, 2e-3, repeats=1)
    monkeypatch.setattr(profiler, "_time_task", failing)
    cache, events = ProfileCache(cpu_name(), [tmp_path]), []
    if not recorded:
        with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
            profiler.profile_tasks(signatures, cache, CUDA, on_event=events.append)
        return
    assert profiler.profile_tasks(signatures, cache, CUDA, on_event=events.append) == \
        len(signatures)
    [failed] = [e for e in events if e.failure]
    assert failed.signature.op.name == "conv1" and failed.entry.oom
    assert str(error).split(":")[0] in failed.failure
    assert sum(e.entry.forward_s is not None for e in events) == len(signatures) - 1


def test_a_device_broken_by_a_block_stops_the_run_with_the_block_recorded(monkeypatch,
                                                                          tmp_path):
    def broken(d=None):
        raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", broken)
    monkeypatch.setattr(profiler, "_time_task", lambda *args: broken())
    signature = conv1()
    cache = ProfileCache(cpu_name(), [tmp_path])
    with pytest.raises(FlextuiError, match=r"profiling stopped: conv2d block .* no longer "
                                           r"works .* run the profile again"):
        profiler.profile_tasks([signature], cache, CUDA)
    assert ProfileCache(cpu_name(), [tmp_path]).get(signature.key).oom   # saved, skipped next


def test_a_block_that_could_not_run_is_shown_with_why():
    """The CLI's progress and the app's Profile screen say which block failed and why."""
    import io

    from rich.console import Console

    from flextui.cli.profile import _ProgressDisplay
    from flextui.cost.estimate import ProfileClock
    from flextui.session.live_profile import LiveProfile
    signature = conv1()
    event = profiler.ProfileEvent(1, 2, signature, profiler.ProfileEntry(None, None, oom=True),
                                  False, "AcceleratorError: CUDA error: [bad] launch")
    out = io.StringIO()
    with _ProgressDisplay(Console(file=out, width=200), ProfileClock([1.0, 1.0]),
                          quiet=False) as shown:
        shown.update(event)
    assert "conv2d 4x6x28x28: could not run, recorded without times: AcceleratorError: CUDA " \
        "error: [bad] launch" in out.getvalue()
    live = LiveProfile(model("lenet", batch_size=4), 1)
    live._clock = ProfileClock([1.0, 1.0])
    live._take(event)
    assert live.view().notices == ("conv2d 4×6×28×28 could not run: AcceleratorError: CUDA "
                                   "error: [bad] launch",)
