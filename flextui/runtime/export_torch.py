"""A MeshPlan as a Python module that imports only torch: ``device_mesh()``,
``parallelize(module, device_mesh)`` and ``local_batch(tensor, device_mesh)``, for the
user's own training loop (``flextui export --format torch``). Every name in it that
came from a file or a module (the strategy's, the layers' paths) is written as a
Python literal or in a comment, never as code."""

from __future__ import annotations

import textwrap

from flextui.runtime.export_types import (
    STYLE_DEFAULTS,
    LayerPlan,
    Layout,
    MeshPlan,
    TensorParallelStyle,
)

#: the mesh dims' names, data parallel then tensor parallel
DATA, TENSOR = "dp", "tp"


def torch_module_text(plan: MeshPlan) -> str:
    """The module's source."""
    dims = _dims(plan)
    sections = [_header(plan), _imports(plan), _constants(plan, dims),
                DEVICE_MESH, _parallelize(plan, dims), _local_batch(plan, dims)]
    return "\n\n\n".join(sections).rstrip() + "\n"


def _dims(plan: MeshPlan) -> dict[str, int]:
    """The mesh's dims: both when both split, else the one that does (dp on one device)."""
    dims = {name: size for name, size in ((DATA, plan.data), (TENSOR, plan.tensor)) if size > 1}
    return dims or {DATA: 1}


def _header(plan: MeshPlan) -> str:
    mesh = " x ".join(f"{size} ({name})" for name, size in _dims(plan).items())
    lines = [f"# flextui's plan for model {plan.model!r}, strategy {plan.strategy!r}, on "
             f"{plan.devices} device{'s' if plan.devices > 1 else ''}:",
             f"# a {mesh} DeviceMesh (flextui export --format torch).",
             "#",
             f"# On every rank (torchrun --nproc-per-node {plan.devices}):",
             "#",
             '#     mesh = device_mesh("cpu")            # "cuda" with GPUs',
             "#     model = parallelize(model, mesh)",
             "#     batch = [local_batch(x, mesh) for x in batch]  # this rank's samples"]
    if plan.followers:
        names = textwrap.wrap(", ".join(repr(name) for name in plan.followers), 84)
        lines += ["#", "# Ops without weights whose split in the strategy this plan does not "
                  "keep (they run", "# where their inputs are):"]
        lines += [f"#     {line}" for line in names]
    return "\n".join(lines)


def _imports(plan: MeshPlan) -> str:
    lines = []
    if plan.data > 1:
        lines.append("from torch.distributed._composable.replicate_with_fsdp import replicate")
    lines.append("from torch.distributed.device_mesh import DeviceMesh, init_device_mesh")
    placements = sorted({option.partition("=")[2].partition("(")[0]
                         for layer in plan.layers for option in _options(layer)
                         if "_layouts=" in option})
    if placements:
        lines.append(f"from torch.distributed.tensor import {', '.join(placements)}")
    if plan.layers:
        styles = sorted({layer.style.value for layer in plan.layers})
        lines.append("from torch.distributed.tensor.parallel import (")
        lines += [f"    {name}," for name in styles]
        lines += ["    parallelize_module,", ")"]
    return "\n".join(lines)


def _constants(plan: MeshPlan, dims: dict[str, int]) -> str:
    lines = [f"MESH_SHAPE = {tuple(dims.values())!r}",
             f"MESH_DIM_NAMES = {tuple(dims)!r}"]
    if plan.layers:
        lines += ["", f"#: each layer (its path in the module) the plan splits over {TENSOR!r}, "
                  "and how", "TENSOR_PARALLEL = {"]
        lines += [_entry(layer) for layer in plan.layers]
        lines.append("}")
    return "\n".join(lines)


def _entry(layer: LayerPlan) -> str:
    """The layer's line of TENSOR_PARALLEL; its options a line each when too long."""
    line = f"    {layer.module!r}: {layer.style.value}({', '.join(_options(layer))}),"
    if len(line) <= 99:
        return line
    return "\n".join([f"    {layer.module!r}: {layer.style.value}(",
                      *(f"        {option}," for option in _options(layer)), "    ),"])


def _options(layer: LayerPlan) -> list[str]:
    """The style's arguments: the layouts that are not its defaults; a sequence split
    gives a plain tensor, as every other layer does."""
    if layer.style is TensorParallelStyle.SEQUENCE:
        return ["use_local_output=True"]
    if layer.style is TensorParallelStyle.GATHER:
        return [f"input_layouts={layer.input.placement}",
                f"desired_input_layouts={Layout.WHOLE.placement}", "use_local_output=True"]
    taken, given = STYLE_DEFAULTS[layer.style]
    return ([f"input_layouts={layer.input.placement}"] if layer.input != taken else []) + \
        ([f"output_layouts={layer.output.placement}"] if layer.output != given else [])


DEVICE_MESH = '''def device_mesh(device_type: str = "cpu") -> DeviceMesh:
    """The mesh this plan is for, over every rank: rank i * tp + j at (i, j)."""
    return init_device_mesh(device_type, MESH_SHAPE, mesh_dim_names=MESH_DIM_NAMES)'''


def _parallelize(plan: MeshPlan, dims: dict[str, int]) -> str:
    def sub(name: str) -> str:
        return "device_mesh" if len(dims) == 1 else f"device_mesh[{name!r}]"
    body = ['    if tuple(device_mesh.shape) != MESH_SHAPE or '
            'device_mesh.mesh_dim_names != MESH_DIM_NAMES:',
            '        raise ValueError(f"this plan is for a mesh of shape {MESH_SHAPE} named '
            '{MESH_DIM_NAMES}, "',
            '                         f"not {device_mesh}: make it with device_mesh()")']
    if plan.layers:
        body.append(f"    parallelize_module(module, {sub(TENSOR)}, TENSOR_PARALLEL)")
    if plan.data > 1:
        body.append(f"    replicate(module, mesh={sub(DATA)})")
    body.append("    return module")
    doc = ('    """Split ``module``\'s layers over ``device_mesh`` as the strategy does '
           '(tensor\n    parallel layers over tp, data parallel over dp); returns ``module``."""')
    return "\n".join(["def parallelize(module, device_mesh: DeviceMesh):", doc, *body])


def _local_batch(plan: MeshPlan, dims: dict[str, int]) -> str:
    head = ['def local_batch(tensor, device_mesh: DeviceMesh):',
            '    """This rank\'s samples of a global batch (its dim 0): data-parallel rank r',
            '    of dp takes the r-th of dp equal blocks; the ranks of a tp group the same."""']
    if plan.data == 1:
        return "\n".join(head + ["    return tensor"])
    rank = "device_mesh.get_local_rank()" if len(dims) == 1 \
        else f"device_mesh.get_local_rank({DATA!r})"
    return "\n".join(head + [f"    return tensor.tensor_split({plan.data})[{rank}]"])
