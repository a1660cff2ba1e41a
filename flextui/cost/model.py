"""The CostModel protocol: what the simulator asks of any source of task times."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Protocol, cast, runtime_checkable

from flextui.cost.optimizers import OptimizerKind
from flextui.cost.ring import ring_allreduce_s
from flextui.graph import Op
from flextui.machine import Cluster, Device, Link


@dataclass(frozen=True)
class OpCost:
    """Time of one task (a block of an op) on one device, and its scratch memory."""

    forward_s: float
    backward_s: float
    workspace_bytes: int = 0


@dataclass(frozen=True)
class LinkTerms:
    """A transfer over a link takes ``latency + nbytes / bandwidth`` seconds."""

    latency: float
    bandwidth: float


def analytic_update_s(nbytes: float, device: Device,
                      optimizer: OptimizerKind = OptimizerKind.SGD) -> float:
    """An optimizer step over an ``nbytes`` shard at memory bandwidth: SGD with momentum
    reads weight, gradient and momentum and writes weight and momentum (five passes);
    AdamW also reads and writes its second moving average (seven)."""
    passes = 7 if optimizer == OptimizerKind.ADAMW else 5
    return passes * nbytes / device.spec.mem_bandwidth


@runtime_checkable
class CostModel(Protocol):
    """Any object with these members can drive the simulator; tests use hand-written
    ones with fixed times. ``identity`` names the model in search logs.

    A class that derives from ``CostModel`` need only define ``identity``, ``op_cost``
    and ``transfer_s``: it inherits ``update_s`` (``analytic_update_s``) and ``allreduce_s``
    (the ring formula over the link specs, ``ring_allreduce_s``). One that does not
    derive from it defines all five; mypy names what it lacks, and so does
    ``checked_cost_model`` (the simulator's and exhaustive search's entry check)."""

    @property
    def identity(self) -> str: ...

    def op_cost(self, op: Op, block_shape: tuple[int, ...], device: Device) -> OpCost: ...

    def transfer_s(self, nbytes: int, link: Link) -> float: ...

    def update_s(self, nbytes: float, device: Device,
                 optimizer: OptimizerKind = OptimizerKind.SGD) -> float:
        """``optimizer``'s update of an ``nbytes`` parameter shard on ``device``."""
        return analytic_update_s(nbytes, device, optimizer)

    def allreduce_s(self, nbytes: float, devices: tuple[int, ...], cluster: Cluster) -> float:
        """The gradient all-reduce of ``nbytes`` over ``devices`` (a replica group)."""
        return ring_allreduce_s(nbytes, devices, cluster)


def allgather_s(model: CostModel, nbytes: float, devices: tuple[int, ...],
                cluster: Cluster) -> float:
    """A ring all-gather (or reduce-scatter) of a group's ``nbytes`` over ``devices``:
    one of the two passes of its ring all-reduce, so half of ``allreduce_s`` (not
    calibrated on its own: what a cost model measures is the all-reduce)."""
    return model.allreduce_s(nbytes, devices, cluster) / 2


def transfer_terms(model: object, link: Link) -> LinkTerms | None:
    """``model.transfer_terms(link)``, or None for a model without it. A cost model may
    have that optional member: the link's latency and bandwidth when its
    ``transfer_s(n, link)`` is exactly ``latency + n / bandwidth`` for every ``n`` (the
    simulator then times transfers in bulk), None when it is not; a model without it
    is asked ``transfer_s`` transfer by transfer."""
    terms = getattr(model, "transfer_terms", None)
    return terms(link) if terms is not None else None


#: what a cost model must have, for the entry check
MEMBERS = ("identity", "op_cost", "transfer_s", "update_s", "allreduce_s")


def checked_cost_model(model: object) -> CostModel:
    """``model``, if it is a cost model; TypeError naming what it lacks if not. Looked up
    statically (as ``isinstance`` does from Python 3.12): a profiled model's identity
    packs its whole table of times."""
    missing = [name for name in MEMBERS if not _has(model, name)]
    if not missing:
        return cast(CostModel, model)
    raise TypeError(f"{type(model).__name__} is not a cost model: it lacks "
                    f"{', '.join(missing)}; define them, or derive it from "
                    "flextui.cost.CostModel to inherit update_s and allreduce_s")


def _has(model: object, name: str) -> bool:
    try:
        inspect.getattr_static(model, name)
    except AttributeError:
        return False
    return True
