"""A rank's GPU utilisation (``steps`` records' ``gpu_util``) is read through NVML from
the GPU the rank computes on, walked without a GPU: a stand-in ``pynvml`` for a machine
of four GPUs and ``torch.cuda``'s device properties as CUDA reports them under
``CUDA_VISIBLE_DEVICES=2,3``."""

import sys
import types

import pytest
import torch

from flextui.runtime.worker import _utilisation

#: the machine's GPUs, in NVML's order: UUID and utilisation (%)
GPUS = [(f"{n:08x}-0000-4000-8000-{n:012x}", 10.0 * n + 5) for n in range(4)]
VISIBLE = [2, 3]   # CUDA_VISIBLE_DEVICES=2,3: cuda:0 is the machine's GPU 2


class NVMLError(Exception):
    pass


@pytest.fixture
def four_gpus(monkeypatch):
    nvml = types.ModuleType("pynvml")
    by_uuid = {f"GPU-{uuid}": n for n, (uuid, _) in enumerate(GPUS)}

    def handle_by_uuid(uuid):
        if uuid not in by_uuid:
            raise NVMLError("Not Found")
        return by_uuid[uuid]

    nvml.nvmlInit = lambda: None
    nvml.nvmlDeviceGetHandleByIndex = lambda index: index       # NVML's own order
    nvml.nvmlDeviceGetHandleByUUID = handle_by_uuid
    nvml.nvmlDeviceGetUtilizationRates = lambda handle: types.SimpleNamespace(
        gpu=GPUS[handle][1], memory=0)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(
        uuid=GPUS[VISIBLE[torch.device(device).index]][0]))


@pytest.mark.parametrize("local, machine", list(enumerate(VISIBLE)))
def test_utilisation_is_the_gpu_the_rank_uses_under_cuda_visible_devices(four_gpus, local,
                                                                         machine):
    assert _utilisation(torch.device("cuda", local))() == GPUS[machine][1]


def test_a_gpu_nvml_does_not_know_has_no_utilisation(four_gpus, monkeypatch):
    """Never another GPU's figure: a device NVML cannot find (a MIG slice) reads None."""
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(uuid="ffffffff-0000-0000-0000-0"))
    assert _utilisation(torch.device("cuda", 0))() is None
    assert _utilisation(torch.device("cpu"))() is None
