"""A strategy as a DeviceMesh plan (``flextui export --format torch``): the checks that
it has one, then the mesh and the layers' styles (``export_layouts.py``).

The mapping (docs/export.md):

- tp is the degree the strategy splits Linear layers' out-features by (one degree for
  all of them), dp the devices over it; rank ``i * tp + j`` is the mesh's (i, j), as
  the strategy numbers a layer's (sample block, feature block) tasks.
- A layer with weights runs on every device, in that order: its samples split dp ways
  and its out-features tp ways (a Linear layer), or a layer norm's samples and sequence
  dp and tp ways, or its samples split over all devices (data parallel: in the plan,
  over dp, repeated over tp; but a batch norm, whose statistics are its block's, only
  when dp is all devices). Anything else (an op on a subset of the devices, another
  degree, a split along another attribute dim, a split along the weights of anything
  but an nn.Linear) has no DeviceMesh form and is refused, naming the op.
- Ops without weights run where their inputs are; a split of theirs the plan does not
  keep is listed (``MeshPlan.followers``), not refused.
"""

from __future__ import annotations

import math

from flextui.graph import DimKind, Op, OpGraph
from flextui.runtime.export_layouts import Mesh, followers, layouts
from flextui.runtime.export_types import MeshPlan, NotExpressible
from flextui.strategy import ParallelConfig, Strategy


def mesh_plan(graph: OpGraph, strategy: Strategy, devices: int) -> MeshPlan:
    """The DeviceMesh plan of ``strategy`` (checked against ``graph`` on ``devices``),
    or NotExpressible naming the first op it cannot express and why."""
    module_params = graph.meta.get("module_params")
    if not isinstance(module_params, dict):
        raise NotExpressible(f"model {graph.name!r} is flextui's own graph, not a PyTorch "
                             "module: export a strategy for a model file (--model FILE.py) or "
                             "an imported model, whose layers the plan names")
    if strategy.pipeline.on:
        raise NotExpressible(f"the strategy cuts each batch into "
                             f"{strategy.pipeline.describe()}, which a DeviceMesh plan does "
                             "not express: run the strategy with `flextui launch`, or export "
                             "it without micro-batches and pipeline the stages in your loop "
                             "(torch.distributed.pipelining)")
    for op in graph.ops:
        _check_distinct(op, strategy[op.name])
        if strategy[op.name].recompute:
            raise NotExpressible(f"op {op.name!r} is recomputed, which a DeviceMesh plan does "
                                 "not express: run the strategy with `flextui launch`, or "
                                 "export it without recomputation and wrap those layers in "
                                 "torch.utils.checkpoint in your loop")
        sharded = [p.name for p in op.params if strategy.shard(p.name)]
        if sharded:
            raise NotExpressible(f"op {op.name!r}: its parameter {sharded[0]!r} has its "
                                 f"training state sharded (stage "
                                 f"{int(strategy.shard(sharded[0]))}), which a DeviceMesh plan "
                                 "does not express: run the strategy with `flextui launch`, or "
                                 "export it without sharding and shard the optimizer in your "
                                 "loop (torch's ZeroRedundancyOptimizer, FSDP)")
    tensor = _tensor_degree(graph, strategy)
    if devices % tensor:
        raise NotExpressible(f"the strategy splits Linear layers {tensor} ways on {devices} "
                             f"devices: a mesh needs a tensor-parallel degree that divides "
                             "the device count")
    mesh = Mesh(devices // tensor, tensor)
    for op in graph.ops:
        if op.params:
            _check_on_mesh(op, strategy[op.name], mesh)
    held, layers = layouts(graph, strategy, mesh, module_params)
    return MeshPlan(strategy.name, str(graph.meta.get("model", graph.name)), mesh.data,
                    mesh.tensor, layers, followers(graph, strategy, mesh, held))


def _degree(op: Op, config: ParallelConfig, kind: DimKind) -> int:
    return math.prod(n for n, dim in zip(config.degrees, op.space) if dim.kind == kind)


def _check_distinct(op: Op, config: ParallelConfig) -> None:
    if len(set(config.devices)) < len(config.devices):
        twice = next(d for d in config.devices if config.devices.count(d) > 1)
        raise NotExpressible(f"op {op.name!r} puts two of its blocks on device {twice}: a mesh "
                             "gives each rank one block of an op")


def _tensor_degree(graph: OpGraph, strategy: Strategy) -> int:
    """The one degree the strategy splits Linear layers' out-features by (1: none);
    a split along the weights of any other op is refused."""
    first: Op | None = None
    for op in graph.ops:
        degree = _degree(op, strategy[op.name], DimKind.PARAMETER)
        if degree == 1:
            continue
        if op.type != "linear" or "rows" in op.attrs or op.attrs.get("transposed"):
            what = "a packed or transposed Linear" if op.type == "linear" else f"{op.type} op"
            raise NotExpressible(f"op {op.name!r} ({what}) is split {degree} ways along its "
                                 "weights: an export splits only nn.Linear layers' weights "
                                 "(ColwiseParallel); give its parameter dim degree 1")
        if first is None:
            first = op
        elif degree != _degree(first, strategy[first.name], DimKind.PARAMETER):
            raise NotExpressible(
                f"op {op.name!r} splits its out-features {degree} ways but op {first.name!r} "
                f"{_degree(first, strategy[first.name], DimKind.PARAMETER)}: a mesh has one "
                "tensor-parallel dim, so every split Linear layer needs the same degree")
    return 1 if first is None else _degree(first, strategy[first.name], DimKind.PARAMETER)


def _check_on_mesh(op: Op, config: ParallelConfig, mesh: Mesh) -> None:
    """A layer with weights runs on every rank in the mesh's order, split (dp, tp) along
    samples and out-features, (dp, tp) along samples and the sequence (a layer norm),
    or along samples over all devices."""
    where, data, tensor, devices = f"op {op.name!r}", mesh.data, mesh.tensor, mesh.devices
    if len(config.devices) < devices:
        raise NotExpressible(
            f"{where} runs on device{'s' if len(config.devices) > 1 else ''} "
            f"{_listed(config.devices)} only, of {devices}: a DeviceMesh plan runs every layer "
            "on every rank (an op on a subset of the devices, as model or pipeline "
            "parallelism places them, has no DeviceMesh form)")
    sample, features = (_degree(op, config, DimKind.SAMPLE),
                        _degree(op, config, DimKind.PARAMETER))
    sequence = op.type == "layernorm" and tensor > 1 and len(op.space) > 2 \
        and config.degrees[:2] == (data, tensor) and sample * tensor == config.num_tasks
    for degree, dim in zip(config.degrees, op.space):
        if degree > 1 and dim.kind == DimKind.ATTRIBUTE and not sequence:
            raise NotExpressible(
                f"{where} splits its dim {dim.name!r} {degree} ways: an export splits a layer "
                "with weights along samples, a Linear layer's out-features, and a layer "
                f"norm's sequence (dim 1) dp and tp ways only; give {dim.name!r} degree 1")
    if (sample, features) not in ((data, tensor), (devices, 1)) and not sequence:
        raise NotExpressible(
            f"{where} splits samples {sample} and out-features {features} ways: on the "
            f"{data} x {tensor} (dp x tp) mesh of this strategy a layer splits them "
            f"{data} and {tensor} ways, or samples {devices} ways")
    if op.type == "batchnorm" and sample != data:
        raise NotExpressible(
            f"{where} is a batch norm, its statistics over its block of samples: the "
            f"strategy splits samples {sample} ways, a plan on the {data} x {tensor} mesh "
            f"{data} ways (dp), which changes them; split it {data} ways or export a strategy "
            "without tensor parallelism")
    if config.devices != tuple(range(devices)):
        raise NotExpressible(
            f"{where} places its blocks on devices {_listed(config.devices)}: a mesh takes "
            f"them in order, block (i, j) of (samples, features) on device i * {tensor} + j")


def _listed(devices: tuple[int, ...]) -> str:
    shown = ", ".join(map(str, devices[:8]))
    return shown + (", ..." if len(devices) > 8 else "")
