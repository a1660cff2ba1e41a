"""Which layers of an exported plan split over tp, and how (``export_plan.py`` checks
the strategy first): every activation's layout over a tp group, followed op by op from
the inputs (whole) through the layers the strategy splits.

- A Linear layer split along out-features is ``ColwiseParallel``, whatever its input's
  layout; its output takes the layout the ops reading it ask for in the strategy when
  they all ask the same, else stays split along features.
- A whole Linear layer whose input arrives split along features is
  ``RowwiseParallel``; its output is whole, or split along the sequence when the ops
  reading it all ask for that (a reduce-scatter).
- A layer norm the strategy splits along the sequence, its input so split, is
  ``SequenceParallel``.
- Any other nn.Linear or nn.LayerNorm layer whose input arrives split gathers it
  (``PrepareModuleInput``).
- Elementwise ops (activations; adds and products of two tensors split alike) keep
  their input's layout. A split activation that reaches anything else (another op, a
  whole tensor, the module's output) is made whole by the split layer it comes from,
  until none does.
"""

from __future__ import annotations

from dataclasses import dataclass

from flextui.graph import DimKind, Op, OpGraph
from flextui.graph.tensor import Tensor
from flextui.runtime.export_types import (
    LayerPlan,
    Layout,
    NotExpressible,
    TensorParallelStyle as Style,
)
from flextui.strategy import ParallelConfig, Strategy


@dataclass(frozen=True)
class Mesh:
    """The mesh's dims: data parallel (dp) by tensor parallel (tp)."""

    data: int
    tensor: int

    @property
    def devices(self) -> int:
        return self.data * self.tensor


@dataclass(frozen=True)
class Held:
    """How the plan holds a split activation: its layout, and the split layers whose
    output it is (through elementwise ops)."""

    layout: Layout
    origins: frozenset[str]


def wanted(op: Op, config: ParallelConfig, mesh: Mesh) -> Layout | None:
    """The layout ``op``'s config asks for over tp: whole (samples over all devices),
    features or sequence (samples dp ways and that dim tp ways), on the devices in
    the mesh's order; None for anything else."""
    if config.devices != tuple(range(mesh.devices)) or not op.space \
            or op.space[0].kind != DimKind.SAMPLE:
        return None
    if config.degrees[0] == mesh.devices:
        return Layout.WHOLE
    if config.degrees[0] != mesh.data or len(op.space) < 2:
        return None
    if config.degrees[-1] == mesh.tensor:
        return Layout.FEATURES
    return Layout.SEQUENCE if len(op.space) > 2 and config.degrees[1] == mesh.tensor else None


def own_module(op: Op, module_params: dict[str, str]) -> str | None:
    """The path of the module that ran ``op`` with its own weight (an nn.Linear's or
    nn.LayerNorm's), or None (a functional call on another module's parameter, a
    packed or transposed weight)."""
    name = module_params.get(op.params[0].name) if op.params else None
    if op.type not in ("linear", "layernorm") or name != f"{op.layer}.weight" \
            or "rows" in op.attrs or op.attrs.get("transposed"):
        return None
    return op.layer


def layouts(graph: OpGraph, strategy: Strategy, mesh: Mesh, module_params: dict[str, str],
            ) -> tuple[dict[Tensor, Held], tuple[LayerPlan, ...]]:
    """The split activations and the layers' plans, in the graph's order."""
    want = {op.name: wanted(op, strategy[op.name], mesh) for op in graph.ops}
    users = graph.consumers
    asked = {op.name: found for op in graph.ops if op.outputs and users[op.outputs[0]]
             and len(found := {want[u.name] for u in users[op.outputs[0]]}) == 1}
    readers_ask = {name: layout for name, (layout,) in asked.items() if layout is not None}
    outputs = [t for t, readers in users.items() if not readers]
    whole: set[str] = set()   # the split layers that must give a whole output
    while True:
        held, plans, conflict = _follow(graph, strategy, mesh, module_params, want,
                                        readers_ask, whole)
        for t in outputs:
            conflict |= held[t].origins if t in held else frozenset()
        if conflict <= whole:
            _check_sequence_norms(graph, want, plans, module_params)
            return held, tuple({plan.module: plan for plan in plans.values()}.values())
        whole |= conflict


def _follow(graph: OpGraph, strategy: Strategy, mesh: Mesh, module_params: dict[str, str],
            want: dict[str, Layout | None], readers_ask: dict[str, Layout], whole: set[str],
            ) -> tuple[dict[Tensor, Held], dict[str, LayerPlan], set[str]]:
    """One pass over the graph: the split activations, the layers' plans, and the
    split layers whose outputs reached an op that cannot take them split."""
    held: dict[Tensor, Held] = {}
    plans: dict[str, LayerPlan] = {}
    conflict: set[str] = set()
    for op in graph.ops:
        ins = [held.get(t) for t in op.inputs]
        origins = frozenset().union(*(h.origins for h in ins if h))
        first = ins[0].layout if ins and ins[0] else Layout.WHOLE
        module = own_module(op, module_params)
        out: Held | None = None
        if op.type == "linear" and strategy[op.name].degrees[-1] > 1:
            if module is None:
                raise NotExpressible(
                    f"op {op.name!r} is split along its out-features but does not call an "
                    "nn.Linear module with its own weight (ColwiseParallel splits a module); "
                    "give its parameter dim degree 1")
            given = Layout.WHOLE if op.name in whole else \
                readers_ask.get(op.name, Layout.FEATURES)
            plans[op.name] = LayerPlan(module, Style.COLWISE, first, given)
            out = Held(given, frozenset({op.name}))
        elif op.type == "linear" and module is not None and first == Layout.FEATURES:
            given = Layout.SEQUENCE if readers_ask.get(op.name) == Layout.SEQUENCE \
                and op.name not in whole else Layout.WHOLE
            plans[op.name] = LayerPlan(module, Style.ROWWISE, first, given)
            out = Held(given, frozenset({op.name}))
        elif op.type == "layernorm" and module is not None and first == Layout.SEQUENCE \
                and want[op.name] == Layout.SEQUENCE:
            plans[op.name] = LayerPlan(module, Style.SEQUENCE, first, first)
            out = Held(first, origins)
        elif module is not None and first != Layout.WHOLE:
            plans[op.name] = LayerPlan(module, Style.GATHER, first, Layout.WHOLE)
        elif origins and _elementwise(op, ins):
            out = Held(first, origins)
        else:
            conflict |= origins
        if out is not None and out.layout != Layout.WHOLE:
            held.update((t, out) for t in op.outputs)
    _check_one_per_module(graph, plans, module_params)
    return held, plans, conflict


def _elementwise(op: Op, ins: list[Held | None]) -> bool:
    """An op that computes each element from the same element of its inputs, so it
    can take them split: a unary function, or an add/sub/mul of two tensors of one
    shape split alike."""
    return op.type == "unary" or (
        op.type == "binary" and all(ins) and op.inputs[0].shape == op.inputs[1].shape
        and len({h.layout for h in ins if h}) == 1)


def _check_one_per_module(graph: OpGraph, plans: dict[str, LayerPlan],
                          module_params: dict[str, str]) -> None:
    """A module has one style: one called by ops the plan splits differently (or
    splits and keeps whole) is refused."""
    seen: dict[str, tuple[str, LayerPlan | None]] = {}
    for op in graph.ops:
        module, plan = own_module(op, module_params), plans.get(op.name)
        if module is None:
            continue
        first, first_plan = seen.setdefault(module, (op.name, plan))
        if first_plan != plan:
            raise NotExpressible(f"module {module!r} is called by ops {first!r} and "
                                 f"{op.name!r}, which the plan would split differently: a "
                                 "module has one parallel style")


def _check_sequence_norms(graph: OpGraph, want: dict[str, Layout | None],
                          plans: dict[str, LayerPlan], module_params: dict[str, str]) -> None:
    """A layer norm the strategy splits along the sequence must be SequenceParallel:
    its input split so in the plan."""
    for op in graph.ops:
        if op.type == "layernorm" and want[op.name] == Layout.SEQUENCE and op.name not in plans:
            how = "its input is not split along the sequence in the plan (it is where it " \
                "comes from a split Linear layer whose every reader splits the sequence " \
                "alike, through elementwise ops)" if own_module(op, module_params) else \
                "it is not an nn.LayerNorm module with its own weight"
            raise NotExpressible(f"op {op.name!r} splits the sequence (dim "
                                 f"{op.space[1].name!r}) but cannot be SequenceParallel: "
                                 f"{how}; give it degree 1 there")


def followers(graph: OpGraph, strategy: Strategy, mesh: Mesh,
              held: dict[Tensor, Held]) -> tuple[str, ...]:
    """The ops without weights whose split the plan does not keep: it runs them on
    their inputs' blocks, samples over dp and as their inputs are split over tp."""
    def layout(op: Op) -> Layout:
        found = held.get(op.outputs[0]) if op.outputs else None
        return found.layout if found else Layout.WHOLE
    return tuple(op.name for op in graph.ops
                 if not op.params and wanted(op, strategy[op.name], mesh) != layout(op))
