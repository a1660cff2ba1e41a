"""The starting parameters of a graph imported from a PyTorch module: the module's own
weights. Each process builds the module itself, from the model source the graph was
given in that process (``OpGraph.source``: what the user typed, or what the launch plan
carries to a rank), under ``torch.manual_seed(seed)``, so a factory that initialises at
random gives every rank, and the one-process reference, the same weights."""

from __future__ import annotations

import torch

from flextui.errors import ModelError
from flextui.graph import OpGraph
from flextui.graph.library import pytorch_model


def module_parameters(graph: OpGraph, seed: int) -> dict[str, torch.Tensor] | None:
    """Every parameter of ``graph`` as the module's whole tensor (by the graph's
    parameter name), or None when the graph was not imported from a module."""
    if not graph.imported:
        return None
    return {name: p.detach() for name, p in seeded_module(graph, seed)[1].items()}


def seeded_module(graph: OpGraph, seed: int) -> tuple[torch.nn.Module,
                                                       dict[str, torch.nn.Parameter]]:
    """The module ``graph`` was imported from, built under ``torch.manual_seed(seed)``,
    and its parameter each of the graph's parameters is (by the graph's name; a tied
    one under each of its names). ModelError when the module does not fit the graph."""
    source = graph.source
    if source is None:
        raise ModelError(f"graph {graph.name!r} was imported from a PyTorch module, and no "
                         "model source was given for it: its weights come only from a "
                         "model the user gave")
    names: dict[str, str] = graph.meta.get("module_params", {})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = pytorch_model(source, graph.meta.get("options")).module()
    own = dict(module.named_parameters(remove_duplicate=False))  # tied weights by each name
    missing = sorted(set(names.values()) - set(own))
    if missing or set(names) != set(graph.parameters):
        raise ModelError(f"model {source.text}: the module model() builds now does not have "
                         f"the parameters the graph was imported with "
                         f"({', '.join(missing)[:200]}); search and launch from the same model")
    params = {name: own[names[name]] for name in graph.parameters}
    for name, param in params.items():
        shape = graph.parameters[name].shape
        if tuple(param.shape) != shape:
            raise ModelError(f"model {source.text}: parameter {names[name]} now has shape "
                             f"{list(param.shape)}, the graph's {list(shape)}")
    return module, params
