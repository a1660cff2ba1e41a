"""Built-in strategies: data parallel, model parallel, the paper's expert strategies,
and random ones.

Expert strategies follow the FlexFlow paper's baselines (section 8.1): for CNNs
Krizhevsky's "one weird trick" (data parallel convolutions, model parallel dense
layers); for RNNs Wu et al.'s GNMT placement (the graph replicated on every node, a
layer per GPU inside a node). Beyond the paper: for
transformers, Megatron-style tensor parallelism inside a node and data parallelism
across nodes; for recommendation models, table-wise placement of embeddings with a
data-parallel MLP.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from flextui.errors import StrategyError
from flextui.graph import DimKind, Op, OpGraph
from flextui.machine import Cluster
from flextui.strategy.config import ParallelConfig, replicated
from flextui.strategy.enumerate import random_config
from flextui.strategy.strategy import Strategy


def _largest_degree(op: Op, dim: int, limit: int) -> int:
    return max(d for d in op.space[dim].valid_degrees() if d <= limit)


def split_dims(op: Op, wanted: dict[int, int], first_device: int = 0) -> ParallelConfig:
    """Split ``op`` along the dims in ``wanted`` (dim -> degree, each shrunk to the
    largest valid degree not above it) on contiguous devices from ``first_device``."""
    degrees = [1] * len(op.space)
    for dim, degree in wanted.items():
        degrees[dim] = _largest_degree(op, dim, degree)
    tasks = math.prod(degrees)
    return ParallelConfig(tuple(degrees), tuple(range(first_device, first_device + tasks)))


def data_parallel_config(op: Op, num_devices: int) -> ParallelConfig:
    return split_dims(op, {0: num_devices})


def _kind_dim(op: Op, kind: DimKind) -> int | None:
    """The last dim of ``op``'s space of the given kind, if any."""
    dims = [i for i, d in enumerate(op.space) if d.kind == kind]
    return dims[-1] if dims else None


def data_parallel(graph: OpGraph, cluster: Cluster) -> Strategy:
    """Every op split along the sample dim over all devices."""
    return Strategy({op.name: data_parallel_config(op, cluster.num_devices) for op in graph.ops},
                    "data-parallel")


def model_parallel(graph: OpGraph, cluster: Cluster) -> Strategy:
    """Whole ops, the topological order cut into one contiguous stage per device with
    about equal forward FLOPs in each."""
    flops = [op.flops(tuple((0, s) for s in op.space_shape))[0] for op in graph.ops]
    total, done, configs = sum(flops) or 1.0, 0.0, {}
    for op, f in zip(graph.ops, flops):
        device = min(int((done + f / 2) / total * cluster.num_devices), cluster.num_devices - 1)
        configs[op.name] = replicated(op, device)
        done += f
    return Strategy(configs, "model-parallel")


def _node_devices(cluster: Cluster) -> list[list[int]]:
    """The device ids of each node, nodes in id order, each node's in the cluster's order."""
    by_node: dict[int, list[int]] = {}
    for device in cluster.devices:
        by_node.setdefault(device.node, []).append(device.id)
    return [by_node[node] for node in sorted(by_node)]


def _node_replicas(op: Op, nodes: list[list[int]], inner: dict[int, int],
                   first_local: int = 0) -> ParallelConfig:
    """``op`` split by samples over the nodes (as many as its batch allows; the sample
    dim is dim 0) and along ``inner`` (dim -> degree) inside each node, on each node's
    GPUs from ``first_local`` on: the same placement on every node."""
    config = split_dims(op, {0: len(nodes), **inner})
    replicas = config.degrees[0]
    per_replica = config.num_tasks // replicas
    return ParallelConfig(config.degrees, tuple(nodes[k][first_local + j] for k in range(replicas)
                                                for j in range(per_replica)))


def _expert_cnn(graph: OpGraph, cluster: Cluster) -> dict[str, ParallelConfig]:
    """Krizhevsky's "one weird trick": data parallel up to the first dense layer; from
    there, dense layers and the elementwise ops between them split their channel dim
    over a node's GPUs (his K workers, which were one machine's) and are replicated
    on every node, data parallel between nodes."""
    nodes = _node_devices(cluster)
    per_node = min(len(ids) for ids in nodes)
    configs, dense = {}, False
    for op in graph.ops:
        dense = dense or op.type == "linear"
        if dense and op.type in ("linear", "unary") and len(op.space) == 2:
            configs[op.name] = _node_replicas(op, nodes, {1: per_node})
        else:
            configs[op.name] = data_parallel_config(op, cluster.num_devices)
    return configs


def _expert_rnn(graph: OpGraph, cluster: Cluster) -> dict[str, ParallelConfig]:
    """Wu et al.'s GNMT placement, as the paper's section 8.1 describes it: the graph is
    replicated on every node (data parallel between nodes), and inside a node the ops of
    one depth share a GPU: recurrent layer i on the node's GPU i mod its GPUs, the ops
    feeding a layer (ids, embeddings) and the stacks of its outputs with it; the output
    layers (attention, dense, softmax) data parallel over all devices."""
    nodes = _node_devices(cluster)
    per_node = min(len(ids) for ids in nodes)
    layers = list(dict.fromkeys(op.layer for op in graph.ops if op.type == "lstm_cell"))
    slot = {op.name: layers.index(op.layer) % per_node
            for op in graph.ops if op.type == "lstm_cell"}
    head = {"linear", "softmax_ce", "attention"}
    for op in reversed(graph.ops):  # feeders take the slot of a pinned consumer
        pinned = [slot[c.name] for c in graph.successors(op) if c.name in slot]
        if op.name not in slot and op.type not in head and pinned:
            slot[op.name] = pinned[0]
    for op in graph.ops:  # the rest follow a pinned producer
        pinned = [slot[p.name] for p in graph.predecessors(op) if p.name in slot]
        if op.name not in slot and op.type not in head and pinned:
            slot[op.name] = pinned[-1]
    return {op.name: _node_replicas(op, nodes, {}, slot[op.name]) if op.name in slot
            else data_parallel_config(op, cluster.num_devices) for op in graph.ops}


def _expert_transformer(graph: OpGraph, cluster: Cluster) -> dict[str, ParallelConfig]:
    """Megatron style: dense layers and attention split their channel/head dim over
    the GPUs of a node and their sample dim over nodes; everything else data parallel."""
    n = cluster.num_devices
    per_node = max(1, n // max(cluster.nodes, 1))
    configs = {}
    for op in graph.ops:
        inner = {"linear": _kind_dim(op, DimKind.PARAMETER),
                 "multihead_attention": len(op.space) - 1}.get(op.type)
        if inner is None:
            configs[op.name] = data_parallel_config(op, n)
            continue
        t = _largest_degree(op, inner, per_node)
        configs[op.name] = split_dims(op, {0: n // t, inner: t})
    return configs


def _expert_recommendation(graph: OpGraph, cluster: Cluster) -> dict[str, ParallelConfig]:
    """Each embedding table whole on one device (round robin), with its ids input;
    the MLPs data parallel."""
    n = cluster.num_devices
    tables = [op for op in graph.ops if op.type == "embedding"]
    device = {op.name: i % n for i, op in enumerate(tables)}
    for op in tables:
        for feeder in graph.predecessors(op):
            if feeder.type == "input":
                device[feeder.name] = device[op.name]
    return {op.name: replicated(op, device[op.name]) if op.name in device
            else data_parallel_config(op, n) for op in graph.ops}


EXPERTS: dict[str, Callable[[OpGraph, Cluster], dict[str, ParallelConfig]]] = {
    "cnn": _expert_cnn,
    "rnn": _expert_rnn,
    "transformer": _expert_transformer,
    "recommendation": _expert_recommendation,
}


def expert(graph: OpGraph, cluster: Cluster) -> Strategy:
    """The expert strategy for the graph's family (data parallel when it has none)."""
    build = EXPERTS.get(graph.family)
    if build is None:
        return Strategy(data_parallel(graph, cluster), "expert")
    return Strategy(build(graph, cluster), "expert")


def random_strategy(graph: OpGraph, cluster: Cluster, seed: int = 0) -> Strategy:
    rng = random.Random(seed)
    return Strategy({op.name: random_config(op, cluster.num_devices, rng) for op in graph.ops},
                    f"random-{seed}")


BUILTIN_STRATEGIES = {
    "data-parallel": data_parallel,
    "model-parallel": model_parallel,
    "expert": expert,
    "random": random_strategy,
}


def builtin_strategy(name: str, graph: OpGraph, cluster: Cluster) -> Strategy:
    try:
        build = BUILTIN_STRATEGIES[name]
    except KeyError:
        raise StrategyError(f"unknown strategy {name!r}; built-in strategies: "
                            f"{', '.join(BUILTIN_STRATEGIES)} "
                            "(or give a strategy .json file)") from None
    return build(graph, cluster)
