"""What the opaque ops of a graph run in a process that did not import it (a rank): the
user's module, built from the model source the launch plan carries and exported at
each op's batch, its program given to each op (``kernels.opaque.bind_program``)."""

from __future__ import annotations

from flextui.errors import ModelError
from flextui.graph import OpGraph
from flextui.graph.kernels.opaque import RegionProgram, bind_program
from flextui.graph.library import pytorch_model


def bind_regions(graph: OpGraph) -> None:
    """Give every opaque op of ``graph`` its program, from ``graph.source``."""
    opaque = [op for op in graph.ops if op.type == "opaque"]
    if not opaque:
        return
    if graph.source is None:
        raise ModelError(f"graph {graph.name!r} has opaque ops and no model source to run "
                         "them from")
    model = pytorch_model(graph.source, graph.meta.get("options"))
    programs: dict[int, RegionProgram] = {}
    for op in opaque:
        batch = op.attrs["batch"]
        if batch not in programs:
            programs[batch] = model.program(batch)
        bind_program(op, programs[batch])
