"""A strategy as a DeviceMesh plan (``flextui export --format torch``): a data x tensor
(dp x tp) mesh of the strategy's devices and, for each Linear layer of the user's
module that tensor parallelism touches, its torch parallel style.

The mapping (docs/export.md):

- tp is the degree the strategy splits Linear layers' out-features by (one degree for
  all of them), dp the devices over it; rank ``i * tp + j`` is the mesh's (i, j), as
  the strategy numbers a layer's (sample block, feature block) tasks.
- A layer with weights runs on every device, in that order, its samples split dp ways
  and its out-features tp ways (a Linear layer only: ``ColwiseParallel``), or its
  samples split over all devices (data parallel: in the plan, over dp, repeated over
  tp; but a batch norm, whose statistics are its block's, only with dp = all
  devices). Anything else (an op on a subset of the devices, another degree, a split
  along a sequence or other attribute dim, a non-Linear layer split along its weights)
  has no DeviceMesh form and is refused, naming the op.
- A Linear layer whose input arrives split along features (from a column-split layer
  through elementwise ops) takes the row split (``RowwiseParallel``): the strategy's
  whole layer behind a gather becomes the same sums split over tp and all-reduced.
  Where a split output meets anything else, the column-split layer gathers it.
- Ops without weights run where their inputs are; a split of theirs the plan does not
  keep is listed (``MeshPlan.followers``), not refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from flextui.errors import StrategyError
from flextui.graph import DimKind, Op, OpGraph
from flextui.graph.tensor import Tensor
from flextui.strategy import ParallelConfig, Strategy


class NotExpressible(StrategyError):
    """A strategy that a DeviceMesh plan cannot express; the message names the op."""


class TensorParallelStyle(StrEnum):
    """The torch parallel styles an export uses, by their class names."""

    COLWISE = "ColwiseParallel"
    ROWWISE = "RowwiseParallel"


@dataclass(frozen=True)
class LayerPlan:
    """One Linear layer's split over tp: ``module`` its path in the user's module;
    for a column split, whether its input arrives split along features (Shard(-1))
    and whether its output is gathered (Replicate()) for what reads it."""

    module: str
    style: TensorParallelStyle
    sharded_input: bool = False
    gathered_output: bool = False


@dataclass(frozen=True)
class MeshPlan:
    """What ``parallelize(module, device_mesh)`` does: the mesh's shape, the layers'
    styles in the module's order, and the ops without weights whose split in the
    strategy the plan does not keep (they run where their inputs are)."""

    strategy: str
    model: str
    data: int
    tensor: int
    layers: tuple[LayerPlan, ...]
    followers: tuple[str, ...]

    @property
    def devices(self) -> int:
        return self.data * self.tensor


def mesh_plan(graph: OpGraph, strategy: Strategy, devices: int) -> MeshPlan:
    """The DeviceMesh plan of ``strategy`` (checked against ``graph`` on ``devices``),
    or NotExpressible naming the first op it cannot express and why."""
    module_params = graph.meta.get("module_params")
    if not isinstance(module_params, dict):
        raise NotExpressible(f"model {graph.name!r} is flextui's own graph, not a PyTorch "
                             "module: export a strategy for a model file (--model FILE.py) or "
                             "an imported model, whose layers the plan names")
    for op in graph.ops:
        _check_distinct(op, strategy[op.name])
    tensor = _tensor_degree(graph, strategy)
    if devices % tensor:
        raise NotExpressible(f"the strategy splits Linear layers {tensor} ways on {devices} "
                             f"devices: a mesh needs a tensor-parallel degree that divides "
                             "the device count")
    for op in graph.ops:
        if op.params:
            _check_on_mesh(op, strategy[op.name], devices // tensor, tensor, devices)
    sharded, layers = _layouts(graph, strategy, module_params)
    return MeshPlan(strategy.name, str(graph.meta.get("model", graph.name)), devices // tensor,
                    tensor, layers, _followers(graph, strategy, sharded, devices // tensor,
                                               devices))


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


def _check_on_mesh(op: Op, config: ParallelConfig, data: int, tensor: int,
                   devices: int) -> None:
    """A layer with weights runs on every rank in the mesh's order, split (dp, tp) or
    along samples over all devices."""
    where = f"op {op.name!r}"
    if len(config.devices) < devices:
        raise NotExpressible(
            f"{where} runs on device{'s' if len(config.devices) > 1 else ''} "
            f"{_listed(config.devices)} only, of {devices}: a DeviceMesh plan runs every layer "
            "on every rank (an op on a subset of the devices, as model or pipeline "
            "parallelism places them, has no DeviceMesh form)")
    for degree, dim in zip(config.degrees, op.space):
        if degree > 1 and dim.kind == DimKind.ATTRIBUTE:
            raise NotExpressible(
                f"{where} splits its dim {dim.name!r} {degree} ways: an export splits a layer "
                "with weights along samples and a Linear layer's out-features only; give "
                f"{dim.name!r} degree 1")
    sample, features = (_degree(op, config, DimKind.SAMPLE),
                        _degree(op, config, DimKind.PARAMETER))
    if (sample, features) not in ((data, tensor), (devices, 1)):
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


def _layer_module(op: Op, module_params: dict[str, str]) -> str | None:
    """The path of the nn.Linear module ``op`` calls, or None when its weight is not
    the own weight of the layer that ran it (a functional call on another module's
    parameter, a weight tied to another module's)."""
    name = module_params.get(op.params[0].name) if op.params else None
    if op.type != "linear" or name != f"{op.layer}.weight" or "rows" in op.attrs \
            or op.attrs.get("transposed"):
        return None
    return op.layer


def _layouts(graph: OpGraph, strategy: Strategy, module_params: dict[str, str],
             ) -> tuple[dict[Tensor, frozenset[str]], tuple[LayerPlan, ...]]:
    """Which tensors the plan holds split along features over tp (each with the
    column-split layers it comes from), and the layers' styles. A column split whose
    output meets an op that cannot take it split is gathered, until none does."""
    colwise = [op for op in graph.ops if _degree(op, strategy[op.name], DimKind.PARAMETER) > 1]
    gathered: set[str] = set()
    outputs = {t for t, users in graph.consumers.items() if not users}
    while True:
        sharded: dict[Tensor, frozenset[str]] = {}
        styles: dict[str, LayerPlan] = {}
        conflict: set[str] = set()
        for op in graph.ops:
            ins = [sharded.get(t) for t in op.inputs]
            split = frozenset().union(*(s for s in ins if s))
            out: frozenset[str] | None = None
            module = _layer_module(op, module_params)
            if op in colwise:
                if module is None:
                    raise NotExpressible(
                        f"op {op.name!r} is split along its out-features but does not call "
                        "an nn.Linear module of its own (ColwiseParallel splits a module); "
                        "give its parameter dim degree 1")
                styles[op.name] = LayerPlan(module, TensorParallelStyle.COLWISE,
                                            bool(split), op.name in gathered)
                out = None if op.name in gathered else frozenset({op.name})
            elif split and op.type == "linear" and module is not None:
                styles[op.name] = LayerPlan(module, TensorParallelStyle.ROWWISE)
            elif split and _elementwise(op, ins):
                out = split
            else:
                conflict |= split
            if out:
                sharded.update((t, out) for t in op.outputs)
        conflict |= frozenset().union(*(sharded[t] for t in outputs if t in sharded))
        if conflict <= gathered:
            return sharded, _by_module(graph, styles, module_params)
        gathered |= conflict


def _elementwise(op: Op, ins: list[frozenset[str] | None]) -> bool:
    """An op that computes each feature from the same feature of its inputs, so it can
    take them split along features: a unary function, or an add/sub/mul of two
    tensors split alike."""
    return op.type == "unary" or (op.type == "binary" and all(ins)
                                  and op.inputs[0].shape == op.inputs[1].shape)


def _by_module(graph: OpGraph, styles: dict[str, LayerPlan],
               module_params: dict[str, str]) -> tuple[LayerPlan, ...]:
    """One style per module, in the graph's order; a module called by ops the plan
    would split differently (or split and keep whole) is refused."""
    per_module: dict[str, tuple[str, LayerPlan | None]] = {}
    for op in graph.ops:
        module, plan = _layer_module(op, module_params), styles.get(op.name)
        if module is None:
            continue
        first, seen = per_module.setdefault(module, (op.name, plan))
        if seen != plan:
            raise NotExpressible(f"module {module!r} is called by ops {first!r} and "
                                 f"{op.name!r}, which the plan would split differently: a "
                                 "module has one parallel style")
    return tuple(plan for _, plan in per_module.values() if plan is not None)


def _followers(graph: OpGraph, strategy: Strategy, sharded: dict[Tensor, frozenset[str]],
               data: int, devices: int) -> tuple[str, ...]:
    """The ops without weights whose split the plan does not keep."""
    return tuple(op.name for op in graph.ops if not op.params and not _kept(
        op, strategy[op.name], bool(op.outputs) and op.outputs[0] in sharded, data, devices))


def _kept(op: Op, config: ParallelConfig, split: bool, data: int, devices: int) -> bool:
    """The plan runs ``op`` on its inputs' blocks: samples over dp (repeated over tp),
    features tp ways where its output is ``split``. The strategy's config is that when
    it splits samples over all devices, or (samples, features) dp and tp ways, in the
    mesh's order."""
    if config.devices != tuple(range(devices)):
        return False
    sample = _degree(op, config, DimKind.SAMPLE)
    return sample == devices or (split and sample == data
                                 and config.degrees[-1] == devices // data)
